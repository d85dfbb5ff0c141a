//! The audit log's files: the active `audit.jsonl` and the older segments `audit.N.jsonl`
//! (a higher N is newer), how a torn tail is repaired, and what retention removes.
//!
//! Invariants:
//! - **Complete lines only.** Before the first append of a process, and before any append
//!   that finds the file not as this process left it (another length, or a write that failed
//!   half-way), the tail is checked: bytes after the last newline, and a last line that is not
//!   JSON, are cut off (and kept aside in `audit.torn-<time>.bin`), so a torn line never
//!   swallows the next record.
//! - **Retention by count and age.** A segment is removed only when the newer files hold at
//!   least [`KEEP_RECORDS`] records *and* its newest record is older than [`KEEP_DAYS`] days,
//!   or when keeping it would pass [`MAX_TOTAL_BYTES`] on disk (logged as an error). The
//!   newest segment always stays, so segment numbers never start again at 1.
//! - **Stable numbers.** A segment keeps its number N; the active file is numbered as the
//!   segment it will become (one past the newest segment). A record's file number and byte
//!   offset are therefore its position for good ([`super::Position`]).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The size past which the active file becomes a segment.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Segments are kept while the newer files hold fewer records than this...
pub const KEEP_RECORDS: u64 = 10_000;
/// ...or while their newest record is younger than this many days.
pub const KEEP_DAYS: i64 = 90;
/// The most the log keeps on disk, whatever the age and count (64 segments).
pub const MAX_TOTAL_BYTES: u64 = 64 * MAX_FILE_BYTES;

/// The name of the active file.
pub(super) const ACTIVE: &str = "audit.jsonl";

/// The active file, open for appends once the first record comes.
pub(super) struct Files {
    dir: PathBuf,
    file: Option<File>,
    /// The active file's length as this process last left it.
    len: u64,
}

impl Files {
    pub(super) fn new(dir: &Path) -> Self {
        Self { dir: dir.to_owned(), file: None, len: 0 }
    }

    pub(super) fn active(&self) -> PathBuf {
        self.dir.join(ACTIVE)
    }

    /// Every file of the log, newest first: the active file, then the segments.
    pub(super) fn all(&self) -> std::io::Result<Vec<PathBuf>> {
        Ok(self.numbered()?.into_iter().map(|(_, p)| p).collect())
    }

    /// Every file of the log with its number, newest first (see the module invariants).
    pub(super) fn numbered(&self) -> std::io::Result<Vec<(u64, PathBuf)>> {
        let segments = segments(&self.dir)?;
        let active = segments.last().map_or(1, |(n, _)| n + 1);
        let mut files = vec![(active, self.active())];
        files.extend(segments.into_iter().rev());
        Ok(files)
    }

    /// Appends `line` (one record and its newline) and fsyncs it; see the module invariants.
    pub(super) fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.file.is_none() {
            std::fs::create_dir_all(&self.dir)?;
            let file =
                OpenOptions::new().create(true).read(true).append(true).open(self.active())?;
            self.len = file.metadata()?.len();
            self.file = Some(file);
            self.repair()?;
            self.prune()?;
        }
        if self.opened()?.metadata()?.len() != self.len {
            self.repair()?;
        }
        if self.len > 0 && self.len + line.len() as u64 > MAX_FILE_BYTES {
            self.rotate()?;
        }
        let len = self.len;
        let file = self.opened()?;
        let written = file.write_all(line).and_then(|()| file.sync_data());
        if let Err(e) = written {
            // Cut what was written of this record; if even that fails, the next append
            // finds the length changed and repairs.
            if file.set_len(len).and_then(|()| file.sync_data()).is_err() {
                self.file = None;
            }
            return Err(e);
        }
        self.len += line.len() as u64;
        Ok(())
    }

    fn opened(&mut self) -> std::io::Result<&mut File> {
        self.file.as_mut().ok_or_else(|| std::io::Error::other("audit log not open"))
    }

    /// Cuts a torn tail off the active file (see the module invariants).
    fn repair(&mut self) -> std::io::Result<()> {
        let path = self.active();
        let aside = self.dir.join(format!("audit.torn-{}.bin", jiff::Timestamp::now()));
        let file = self.opened()?;
        let len = file.metadata()?.len();
        let good = complete_end(file, len)?;
        if good < len {
            let mut torn = vec![0; (len - good) as usize];
            file.seek(SeekFrom::Start(good))?;
            file.read_exact(&mut torn)?;
            std::fs::write(&aside, &torn)?;
            file.set_len(good)?;
            file.sync_all()?;
            tracing::warn!(
                file = %path.display(),
                torn_bytes = len - good,
                kept_aside = %aside.display(),
                "the audit log ended in a torn record; it was cut off so the log goes on after \
                 the last complete record"
            );
        }
        self.len = good;
        Ok(())
    }

    /// Makes the active file the newest segment and starts a new one.
    fn rotate(&mut self) -> std::io::Result<()> {
        let next = segments(&self.dir)?.last().map_or(1, |(n, _)| n + 1);
        let segment = self.dir.join(format!("audit.{next}.jsonl"));
        std::fs::rename(self.active(), &segment)?;
        File::open(&self.dir)?.sync_all()?;
        self.file =
            Some(OpenOptions::new().create(true).read(true).append(true).open(self.active())?);
        self.len = 0;
        self.prune()
    }

    /// Removes the segments retention no longer keeps (see the module invariants).
    fn prune(&mut self) -> std::io::Result<()> {
        let mut records = count_lines(&self.active())?;
        let mut bytes = self.len;
        let oldest_kept = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(24 * KEEP_DAYS);
        for (i, (_, segment)) in segments(&self.dir)?.into_iter().rev().enumerate() {
            let size = std::fs::metadata(&segment)?.len();
            let young = newest_at(&segment)?.is_none_or(|at| at >= oldest_kept);
            let over_cap = bytes + size > MAX_TOTAL_BYTES;
            // The newest segment stays (it holds the numbering; with the active file it is
            // far below the cap).
            if i > 0 && (over_cap || (records >= KEEP_RECORDS && !young)) {
                if over_cap && (young || records < KEEP_RECORDS) {
                    tracing::error!(
                        file = %segment.display(),
                        "the audit log passed its {} MiB cap: its oldest records go before \
                         their time",
                        MAX_TOTAL_BYTES >> 20
                    );
                }
                std::fs::remove_file(&segment)?;
                continue;
            }
            bytes += size;
            if records < KEEP_RECORDS {
                records += count_lines(&segment)?;
            }
        }
        Ok(())
    }
}

/// The segments `audit.N.jsonl` in `dir`, oldest (lowest N) first.
fn segments(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let number = name
            .to_str()
            .and_then(|n| n.strip_prefix("audit.")?.strip_suffix(".jsonl")?.parse::<u64>().ok());
        if let Some(n) = number {
            found.push((n, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// How many lines (records) `path` holds; 0 when it does not exist.
fn count_lines(path: &Path) -> std::io::Result<u64> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let mut n = 0;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(n);
        }
        n += buf.iter().filter(|&&b| b == b'\n').count() as u64;
        let used = buf.len();
        reader.consume(used);
    }
}

/// When the newest record of a segment was written (`None` when it cannot be told).
fn newest_at(path: &Path) -> std::io::Result<Option<jiff::Timestamp>> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let end = complete_end(&mut file, len)?;
    let Some(line) = last_line(&mut file, end)? else { return Ok(None) };
    let at = serde_json::from_slice::<serde_json::Value>(&line)
        .ok()
        .and_then(|v| v["at"].as_str()?.parse::<jiff::Timestamp>().ok());
    Ok(at)
}

/// The end of the file's last complete, parseable line: after the last newline, and before
/// that line too when it is not JSON.
fn complete_end(file: &mut File, len: u64) -> std::io::Result<u64> {
    let end = last_newline(file, len)?.map_or(0, |i| i + 1);
    match last_line(file, end)? {
        Some(line) if serde_json::from_slice::<serde_json::Value>(&line).is_err() => {
            Ok(end - line.len() as u64 - 1)
        }
        _ => Ok(end),
    }
}

/// The line ending (with its newline) at `end`, without the newline; `None` at the start.
fn last_line(file: &mut File, end: u64) -> std::io::Result<Option<Vec<u8>>> {
    if end == 0 {
        return Ok(None);
    }
    let start = last_newline(file, end - 1)?.map_or(0, |i| i + 1);
    let mut line = vec![0; (end - 1 - start) as usize];
    file.seek(SeekFrom::Start(start))?;
    file.read_exact(&mut line)?;
    Ok(Some(line))
}

/// The offset of the last `\n` before `end`, reading backwards a block at a time.
fn last_newline(file: &mut File, end: u64) -> std::io::Result<Option<u64>> {
    const BLOCK: u64 = 64 * 1024;
    let mut buf = vec![0; BLOCK as usize];
    let mut to = end;
    while to > 0 {
        let from = to.saturating_sub(BLOCK);
        let chunk = &mut buf[..(to - from) as usize];
        file.seek(SeekFrom::Start(from))?;
        file.read_exact(chunk)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            return Ok(Some(from + i as u64));
        }
        to = from;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(n: u64, at: &str) -> Vec<u8> {
        format!("{{\"n\":{n},\"at\":\"{at}\"}}\n").into_bytes()
    }

    fn lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path).unwrap().lines().map(str::to_owned).collect()
    }

    #[test]
    fn a_torn_tail_is_cut_before_the_next_append_and_kept_aside() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Files::new(dir.path());
        files.append(&line(1, "2026-01-01T00:00:00Z")).unwrap();
        // Torn behind the writer's back: no newline, then a complete line that is not JSON.
        for torn in [&b"{\"n\":2,\"at\""[..], b"{\"n\":2,\n{\"n\""] {
            let mut f = OpenOptions::new().append(true).open(files.active()).unwrap();
            f.write_all(torn).unwrap();
            files.append(&line(3, "2026-01-01T00:00:01Z")).unwrap();
            let got = lines(&files.active());
            assert_eq!(got.last().unwrap(), r#"{"n":3,"at":"2026-01-01T00:00:01Z"}"#);
            assert!(got.iter().all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()));
        }
        let aside: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("audit.torn-"))
            .collect();
        assert!(!aside.is_empty());
        // At the start of a process too.
        let mut f = OpenOptions::new().append(true).open(files.active()).unwrap();
        f.write_all(b"{\"n\":4").unwrap();
        let mut again = Files::new(dir.path());
        again.append(&line(5, "2026-01-01T00:00:02Z")).unwrap();
        let got = lines(&again.active());
        assert_eq!(got.len(), 4);
        assert!(got[3].contains("\"n\":5"));
    }

    #[test]
    fn segments_go_only_when_both_count_and_age_let_them() {
        let dir = tempfile::tempdir().unwrap();
        let old = "2000-01-01T00:00:00Z";
        let seg = |n: u64, records: u64, at: &str| {
            let text: Vec<u8> = (0..records).flat_map(|i| line(i, at)).collect();
            std::fs::write(dir.path().join(format!("audit.{n}.jsonl")), text).unwrap();
        };
        let now = jiff::Timestamp::now().to_string();
        // Old but needed for the count: kept. Then enough newer records: the oldest go.
        seg(1, 10, old);
        seg(2, 10, old);
        let mut files = Files::new(dir.path());
        files.append(&line(0, &now)).unwrap();
        assert!(dir.path().join("audit.1.jsonl").exists());
        seg(3, KEEP_RECORDS, old);
        let mut files = Files::new(dir.path());
        files.append(&line(0, &now)).unwrap();
        assert!(dir.path().join("audit.3.jsonl").exists(), "needed for the count");
        assert!(!dir.path().join("audit.2.jsonl").exists(), "old, and the count is met");
        assert!(!dir.path().join("audit.1.jsonl").exists());
        // Young segments stay whatever the count.
        seg(4, KEEP_RECORDS, &now);
        seg(5, KEEP_RECORDS, &now);
        let mut files = Files::new(dir.path());
        files.append(&line(0, &now)).unwrap();
        assert!(dir.path().join("audit.4.jsonl").exists());
        assert!(!dir.path().join("audit.3.jsonl").exists(), "old, count met by 4 and 5");
    }

    #[test]
    fn the_newest_segment_stays_so_numbers_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let old = "2000-01-01T00:00:00Z";
        let text: Vec<u8> = (0..3).flat_map(|i| line(i, old)).collect();
        std::fs::write(dir.path().join("audit.7.jsonl"), &text).unwrap();
        std::fs::write(dir.path().join("audit.6.jsonl"), &text).unwrap();
        let now = jiff::Timestamp::now().to_string();
        let active: Vec<u8> = (0..KEEP_RECORDS).flat_map(|i| line(i, &now)).collect();
        std::fs::write(dir.path().join(ACTIVE), active).unwrap();
        let mut files = Files::new(dir.path());
        files.append(&line(0, &now)).unwrap();
        assert!(!dir.path().join("audit.6.jsonl").exists(), "old, and the count is met");
        assert!(dir.path().join("audit.7.jsonl").exists(), "old, but the newest segment");
        let numbers: Vec<u64> = files.numbered().unwrap().iter().map(|(n, _)| *n).collect();
        assert_eq!(numbers, [8, 7]);
    }

    #[test]
    fn a_full_file_becomes_the_newest_segment() {
        let dir = tempfile::tempdir().unwrap();
        let pad = "x".repeat((MAX_FILE_BYTES - 60) as usize);
        let at = jiff::Timestamp::now().to_string();
        let big = format!("{{\"at\":\"{at}\",\"pad\":\"{pad}\"}}\n");
        std::fs::write(dir.path().join(ACTIVE), &big).unwrap();
        let mut files = Files::new(dir.path());
        files.append(&line(1, &at)).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join("audit.1.jsonl")).unwrap(), big);
        assert_eq!(lines(&files.active()).len(), 1);
        files.append(&line(2, &at)).unwrap();
        assert_eq!(lines(&files.active()).len(), 2, "no rotation below the size");
        let all: Vec<String> = files
            .all()
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(all, ["audit.jsonl", "audit.1.jsonl"]);
    }
}
