//! Landing files: when a file in a landing directory is finished, and how it is read safely.
//!
//! A sender may write a file in place (an SFTP client creates it empty, writes, pauses,
//! writes again) or under a temporary name it renames at the end. Invariants kept here:
//! - a name matching [`PartialNames`] is never taken, nor is an empty file;
//! - a file is read only if its [`Stamp`] (size, mtime, inode) is the settled one before and
//!   after the read, and at most `max_file_bytes + 1` bytes are ever read;
//! - a file whose last interchange has no trailer yet is taken only once it has been unchanged
//!   for `incomplete_grace` (see [`looks_complete`]).

use std::fs::Metadata;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Globs over file names that mark a file still being written (`gateway.partial_names`).
#[derive(Debug, Clone)]
pub struct PartialNames {
    set: globset::GlobSet,
    patterns: Vec<String>,
}

impl PartialNames {
    /// Compiles the globs; the error is `(index, pattern, why)`.
    pub fn new(patterns: &[String]) -> Result<Self, (usize, String, String)> {
        let mut b = globset::GlobSetBuilder::new();
        for (i, p) in patterns.iter().enumerate() {
            if p.is_empty() {
                return Err((i, p.clone(), "a pattern must not be empty".into()));
            }
            let g = globset::Glob::new(p).map_err(|e| (i, p.clone(), format!("bad glob: {e}")))?;
            b.add(g);
        }
        let set = b.build().map_err(|e| (0, String::new(), e.to_string()))?;
        Ok(Self { set, patterns: patterns.to_vec() })
    }

    /// True when `name` (a file name, no directory) belongs to a file still being written.
    pub fn matches(&self, name: &str) -> bool {
        self.set.is_match(name)
    }

    /// The patterns as configured.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }
}

impl PartialEq for PartialNames {
    fn eq(&self, other: &Self) -> bool {
        self.patterns == other.patterns
    }
}

impl<'de> serde::Deserialize<'de> for PartialNames {
    /// A list of globs; a refused one is named with its index (`partial_names[1] = "a["`).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let patterns = Vec::<String>::deserialize(d)?;
        PartialNames::new(&patterns).map_err(|(i, value, why)| {
            serde::de::Error::custom(format!("partial_names[{i}] = {value:?}: {why}"))
        })
    }
}

/// What identifies one version of a file: if any part changes, the file was written to or
/// replaced since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    /// Size in bytes.
    pub len: u64,
    /// Modification time, where the platform has one.
    pub modified: Option<SystemTime>,
    /// Inode number (0 where the platform has none): a file replaced by rename changes it.
    pub ino: u64,
}

impl Stamp {
    /// The stamp of `meta`.
    pub(crate) fn of(meta: &Metadata) -> Self {
        #[cfg(unix)]
        let ino = std::os::unix::fs::MetadataExt::ino(meta);
        #[cfg(not(unix))]
        let ino = 0;
        Self { len: meta.len(), modified: meta.modified().ok(), ino }
    }

    /// The current stamp of the file at `path` (not following a symlink).
    pub(crate) fn at(path: &Path) -> std::io::Result<Self> {
        std::fs::symlink_metadata(path).map(|m| Self::of(&m))
    }
}

/// What reading a settled file gave.
#[derive(Debug)]
pub(crate) enum Contents {
    /// The whole file, unchanged while it was read.
    Bytes(Vec<u8>),
    /// The file changed (or was replaced) since it settled: look again later.
    Changed,
}

/// Reads the file at `path` if it still is the version `expected`.
pub(crate) fn read_if_unchanged(path: &Path, expected: Stamp) -> std::io::Result<Contents> {
    let f = std::fs::File::open(path)?;
    if Stamp::of(&f.metadata()?) != expected {
        return Ok(Contents::Changed);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(expected.len).unwrap_or(0));
    // One byte more than expected tells that the file grew while it was read.
    (&f).take(expected.len.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 != expected.len
        || Stamp::of(&f.metadata()?) != expected
        || Stamp::at(path)? != expected
    {
        return Ok(Contents::Changed);
    }
    Ok(Contents::Bytes(bytes))
}

/// True when `bytes` may be taken now: they do not end in an interchange still being written.
/// Unfinished means: the last interchange has no trailer (IEA / UNZ) or its trailer segment has
/// no terminator, or what follows the last interchange (or the whole file, when there is none)
/// is the start of a header (`ISA`, `UNA`, `UNB`) cut short. Other bytes (junk that no append
/// can make valid) count as finished, so the parser rejects them at once with the reason.
pub(crate) fn looks_complete(bytes: &[u8]) -> bool {
    complete(bytes, &crate::envelope::scan(bytes, |_| None))
}

/// [`looks_complete`] from the parse of `bytes` already made.
pub(crate) fn complete(bytes: &[u8], scan: &crate::envelope::Scan) -> bool {
    let Some(last) = scan.envelopes.last() else {
        // Nothing but whitespace yet is unfinished too.
        return !bytes.iter().all(u8::is_ascii_whitespace) && !header_start(bytes);
    };
    let tail = bytes.get(last.span.end..).unwrap_or_default();
    !last.unfinished && !header_start(tail)
}

/// True when `bytes`, after leading whitespace, are non-empty and begin like an interchange
/// header (`ISA`, `UNA`, `UNB`), or are a shorter prefix of one.
fn header_start(bytes: &[u8]) -> bool {
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace());
    let Some(rest) = start.and_then(|i| bytes.get(i..)) else { return false };
    let head = &rest[..rest.len().min(3)];
    [b"ISA", b"UNA", b"UNB"].iter().any(|tag| tag.starts_with(head))
}

/// The directory, inside a landing directory, that files over `max_file_bytes` are moved to
/// (same file system, so the move is a rename and cannot fail for lack of space).
pub(crate) const TOO_LARGE_DIR: &str = "too-large";

/// Moves the file at `path` into `<its dir>/too-large/` under a unique name, with a
/// `<name>.reason` note beside it; returns the new path.
pub(crate) fn move_aside(path: &Path, reason: &str) -> std::io::Result<PathBuf> {
    move_aside_in(path.parent().unwrap_or(Path::new(".")), path, reason)
}

/// [`move_aside`] into `landing`'s `too-large/`, for a file kept elsewhere in it (a taken
/// file in `.tollgate-taken/`).
pub(crate) fn move_aside_in(landing: &Path, path: &Path, reason: &str) -> std::io::Result<PathBuf> {
    let dir = landing.join(TOO_LARGE_DIR);
    std::fs::create_dir_all(&dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // Landing files carry the OS's timestamps, so their names use the OS clock too.
    let target = dir.join(format!("{}-{name}", jiff::Timestamp::now().as_millisecond()));
    std::fs::rename(path, &target)?;
    let mut note = target.clone().into_os_string();
    note.push(".reason");
    // Moved: a note that cannot be written is logged, and the move stands.
    if let Err(e) = std::fs::write(&note, format!("{reason}\n")) {
        tracing::warn!(path = %target.display(), %reason, error = %e, "set aside in too-large/, but its .reason note cannot be written");
    }
    let _ = crate::spool::sync_dir(&dir);
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> PartialNames {
        crate::config::GatewayConfig::default().partial_names
    }

    #[test]
    fn temporary_names_of_common_clients_are_partial() {
        let n = names();
        for name in [".x.edi", "x.edi.filepart", "x.part", "x.partial", "x.tmp", "x.edi~"] {
            assert!(n.matches(name), "{name}");
        }
        for name in ["x.edi", "x.x12", "part.edi", "tmp"] {
            assert!(!n.matches(name), "{name}");
        }
    }

    #[test]
    fn completeness_follows_the_last_trailer() {
        let full = b"ISA*00*          *00*          *ZZ*A              *ZZ*B              \
*240101*1200*U*00401*000000001*0*P*>~GS*QM*A*B*20240101*1200*1*X*004010~ST*214*0001~\
B10*1*2*S~SE*3*0001~GE*1*1~IEA*1*000000001~\n";
        assert!(looks_complete(full));
        for cut in [0, 10, 120, full.len() - 12, full.len() - 3] {
            assert!(!looks_complete(&full[..cut]), "cut at {cut}");
        }
        let mut two = full.to_vec();
        two.extend_from_slice(&full[..150]);
        assert!(!looks_complete(&two));
        two.truncate(full.len() + 2);
        assert!(!looks_complete(&two), "a header cut after two bytes");
        // Junk no append can repair is finished: the parser rejects it at once.
        assert!(looks_complete(b"hello, this is not EDI"));
        let mut junk_after = full.to_vec();
        junk_after.extend_from_slice(b"trailing junk");
        assert!(looks_complete(&junk_after));
    }

    #[test]
    fn a_changed_file_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.edi");
        std::fs::write(&p, b"abc").unwrap();
        let s = Stamp::at(&p).unwrap();
        assert!(matches!(read_if_unchanged(&p, s).unwrap(), Contents::Bytes(b) if b == b"abc"));
        std::fs::write(&p, b"abcd").unwrap();
        assert!(matches!(read_if_unchanged(&p, s).unwrap(), Contents::Changed));
    }
}
