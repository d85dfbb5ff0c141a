//! The file side of `benches/gateway-load.sh`: writes X12 214 interchanges of a given size into
//! a staging directory, then renames them into a gateway's landing directory and times their
//! delivery into the outbound directory.
//!
//! ```text
//! drop214 write STAGE COUNT [SIZE] [FIRST_CONTROL]
//! drop214 drop STAGE INBOUND OUTBOUND [TIMEOUT_S]
//! ```
//! `write`: COUNT files of about SIZE bytes (default 1024), senders `ZZ:P000`…`ZZ:P049` in turn,
//! receiver `ZZ:ACME`, ISA13 = FIRST_CONTROL (default 1) counting up, so that runs on the same
//! gateway never repeat a (sender, receiver, control number): no file is a duplicate. Each file
//! is parsed back before it is written; one that is not exactly one clean interchange of one
//! transaction from its sender stops the run (exit 1). `drop`: renames every file of STAGE into
//! INBOUND, then waits until OUTBOUND holds that many more files (dot files, the gateway's
//! temporary names, do not count) and prints
//! `DROP files=N rename_s=… secs=… rate=…` (rate = N / seconds from the first rename until the
//! last file is there). Exit 1 when they are not all there after TIMEOUT_S (default 300).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use tollgate_testkit::Status214;

/// Distinct senders the files cycle through.
const SENDERS: u32 = 50;
/// How often `drop` counts the outbound directory: often enough for a rate over a few seconds
/// to be right within a percent, rarely enough that counting costs little CPU.
const POLL: Duration = Duration::from_millis(20);

/// The interchange of file `i` of a run whose first control number is `first`.
fn interchange(i: u32, first: u32, size: usize) -> (String, u32, Vec<u8>) {
    let sender = format!("P{:03}", i % SENDERS);
    let control = first + i;
    let bytes = Status214::new(&sender, control).receiver("ACME").padded_to(size).build();
    (sender, control, bytes)
}

/// Checks that `bytes` parse as exactly one clean interchange of one 214 from `ZZ:<sender>`
/// with ISA13 `control`.
fn check(bytes: &[u8], sender: &str, control: u32) -> Result<(), String> {
    let parsed = tollgate_edi::parse(bytes);
    let fail = |why: String| Err(format!("interchange {control} from {sender}: {why}"));
    if !parsed.errors.is_empty() {
        return fail(format!("file errors {:?}", parsed.errors));
    }
    let [ic] = parsed.interchanges.as_slice() else {
        return fail(format!("{} interchanges, expected 1", parsed.interchanges.len()));
    };
    if !ic.errors.is_empty() || !ic.complete {
        return fail(format!("envelope errors {:?} (complete: {})", ic.errors, ic.complete));
    }
    if ic.sender.to_string() != format!("ZZ:{sender}") {
        return fail(format!("sender {}", ic.sender));
    }
    if ic.control_number.as_str() != format!("{control:09}") {
        return fail(format!("control number {}", ic.control_number.as_str()));
    }
    let kinds: Vec<&str> = ic.transactions().map(|t| t.kind.as_str()).collect();
    if kinds != ["214"] {
        return fail(format!("transactions {kinds:?}, expected one 214"));
    }
    Ok(())
}

/// Writes `count` checked interchanges into `stage`; returns the size of the first.
fn write(stage: &Path, count: u32, size: usize, first: u32) -> Result<usize, String> {
    std::fs::create_dir_all(stage).map_err(|e| format!("{}: {e}", stage.display()))?;
    let mut first_len = 0;
    for i in 0..count {
        let (sender, control, bytes) = interchange(i, first, size);
        check(&bytes, &sender, control)?;
        let path = stage.join(format!("{control:09}.edi"));
        std::fs::write(&path, &bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        if i == 0 {
            first_len = bytes.len();
        }
    }
    Ok(first_len)
}

/// Files in `dir` whose names do not start with a dot.
fn count(dir: &Path) -> Result<usize, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(entries.flatten().filter(|e| !e.file_name().as_encoded_bytes().starts_with(b".")).count())
}

fn drop_files(stage: &Path, inbound: &Path, out: &Path, timeout: Duration) -> Result<(), String> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(stage)
        .map_err(|e| format!("{}: {e}", stage.display()))?
        .flatten()
        .map(|e| e.path())
        .collect();
    names.sort();
    let n = names.len();
    let target = count(out)? + n;
    let t0 = Instant::now();
    for from in &names {
        let to = inbound.join(from.file_name().unwrap_or_default());
        std::fs::rename(from, &to)
            .map_err(|e| format!("{} -> {}: {e}", from.display(), to.display()))?;
    }
    let renamed = t0.elapsed().as_secs_f64();
    loop {
        let there = count(out)?;
        if there >= target {
            break;
        }
        if t0.elapsed() > timeout {
            return Err(format!(
                "{} of {n} files delivered after {:.0} s",
                n + there - target,
                timeout.as_secs_f64()
            ));
        }
        std::thread::sleep(POLL);
    }
    let secs = t0.elapsed().as_secs_f64();
    println!("DROP files={n} rename_s={renamed:.3} secs={secs:.3} rate={:.0}", n as f64 / secs);
    Ok(())
}

fn arg<T: std::str::FromStr>(
    args: &[String],
    i: usize,
    name: &str,
    default: T,
) -> Result<T, String> {
    match args.get(i) {
        None => Ok(default),
        Some(s) => s.parse().map_err(|_| format!("{name}: not a number: {s:?}")),
    }
}

fn run(args: &[String]) -> Result<(), String> {
    match (args.get(1).map(String::as_str), args.get(2)) {
        (Some("write"), Some(stage)) => {
            let count = arg(args, 3, "COUNT", 0u32)?;
            let size = arg(args, 4, "SIZE", 1024usize)?;
            let first = arg(args, 5, "FIRST_CONTROL", 1u32)?;
            if first == 0 || u64::from(first) + u64::from(count) > 999_999_999 {
                return Err(format!(
                    "FIRST_CONTROL {first} + COUNT {count}: ISA13 is 1 to 999999999"
                ));
            }
            let len = write(Path::new(stage), count, size, first)?;
            println!("WROTE files={count} bytes={len} first_control={first}");
            Ok(())
        }
        (Some("drop"), Some(stage)) if args.len() >= 5 => {
            let timeout = Duration::from_secs(arg(args, 5, "TIMEOUT_S", 300u64)?);
            drop_files(Path::new(stage), Path::new(&args[3]), Path::new(&args[4]), timeout)
        }
        _ => Err("usage: drop214 write STAGE COUNT [SIZE] [FIRST_CONTROL] | \
                  drop214 drop STAGE INBOUND OUTBOUND [TIMEOUT_S]"
            .to_owned()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("drop214: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_clean_distinct_interchanges_of_the_asked_size() {
        let dir = tempfile::tempdir().unwrap();
        let len = write(dir.path(), 120, 1024, 7).unwrap();
        assert!((900..=1100).contains(&len), "{len}");
        let mut names: Vec<_> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names.len(), 120);
        assert_eq!(names[0], "000000007.edi");
        let text = std::fs::read(dir.path().join("000000126.edi")).unwrap();
        check(&text, "P019", 126).unwrap();
    }

    #[test]
    fn check_refuses_what_the_gateway_would_not_deliver() {
        let (sender, control, good) = interchange(3, 1, 1024);
        check(&good, &sender, control).unwrap();
        let truncated = &good[..good.len() - 10];
        assert!(check(truncated, &sender, control).is_err());
        let mut bad_count = String::from_utf8(good.clone()).unwrap();
        bad_count = bad_count.replace("GE*1*", "GE*2*");
        assert!(check(bad_count.as_bytes(), &sender, control).is_err());
        assert!(check(&good, "P999", control).unwrap_err().contains("sender"));
        assert!(check(&good, &sender, control + 1).unwrap_err().contains("control number"));
    }

    #[test]
    fn drop_waits_for_every_file_and_times_out_when_they_do_not_come() {
        let root = tempfile::tempdir().unwrap();
        let (stage, inbound, out) =
            (root.path().join("stage"), root.path().join("in"), root.path().join("out"));
        for d in [&inbound, &out] {
            std::fs::create_dir_all(d).unwrap();
        }
        // Nothing delivers: the drop gives up and says how many came.
        write(&stage, 3, 1024, 1).unwrap();
        let err = drop_files(&stage, &inbound, &out, Duration::from_millis(50)).unwrap_err();
        assert!(err.starts_with("0 of 3 files delivered"), "{err}");
        assert_eq!(count(&inbound).unwrap(), 3);
        assert_eq!(count(&stage).unwrap(), 0);
        // A temporary (dot) name in the outbound directory is not a delivered file.
        std::fs::write(out.join(".000000001.edi.tmp"), b"x").unwrap();
        write(&stage, 2, 1024, 10).unwrap();
        let err = drop_files(&stage, &inbound, &out, Duration::from_millis(50)).unwrap_err();
        assert!(err.starts_with("0 of 2"), "{err}");
        // Something moves the 5 landed files out after a while: the drop waits for them.
        write(&stage, 1, 1024, 20).unwrap();
        let (from, to) = (inbound.clone(), out.clone());
        let mover = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            for e in std::fs::read_dir(&from).unwrap() {
                let e = e.unwrap();
                std::fs::rename(e.path(), to.join(e.file_name())).unwrap();
            }
        });
        drop_files(&stage, &inbound, &out, Duration::from_secs(30)).unwrap();
        mover.join().unwrap();
        assert_eq!(count(&out).unwrap(), 6);
    }
}
