//! Listing the audit log a page at a time, newest first: where a record sits ([`Position`],
//! the cursor of `GET /v1/audit?before=`), which records a page keeps ([`Filter`]), and the
//! walk back through the files from a position.
//!
//! A position is the record's file number and byte offset (see `files`: numbers never change
//! and records are only appended), so a cursor names the same record however many are written
//! after it; records older than a removed segment are gone, and a cursor into one lists what
//! is older still.

use std::path::PathBuf;

use serde_json::Value;

/// Where a record sits in the log: the number of its file and the byte offset of its line.
/// A smaller position is an older record. Written `FILE-OFFSET` (`3-18234`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    /// The file's number (a segment's N; the active file's is one past the newest segment).
    pub file: u64,
    /// The first byte of the record's line in that file.
    pub offset: u64,
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.file, self.offset)
    }
}

impl std::str::FromStr for Position {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let why = || {
            "a position is two whole numbers joined by `-` (FILE-OFFSET, as given in a Link header)"
                .to_owned()
        };
        let (file, offset) = s.split_once('-').ok_or_else(why)?;
        let number = |t: &str| {
            let digits = !t.is_empty() && t.len() <= 19 && t.bytes().all(|b| b.is_ascii_digit());
            digits.then(|| t.parse::<u64>().ok()).flatten().ok_or_else(why)
        };
        Ok(Self { file: number(file)?, offset: number(offset)? })
    }
}

/// Which records a page lists: each needle (lowercase) must be found in its field, ignoring
/// case; `None` lets every record through.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    action: Option<String>,
    who: Option<String>,
    target: Option<String>,
}

impl Filter {
    /// Records whose `action`, `who` and `target` hold the given texts (any case); an empty
    /// text filters nothing.
    pub fn new(action: Option<&str>, who: Option<&str>, target: Option<&str>) -> Self {
        let needle = |t: Option<&str>| t.filter(|t| !t.is_empty()).map(str::to_lowercase);
        Self { action: needle(action), who: needle(who), target: needle(target) }
    }

    fn keeps(&self, record: &Value) -> bool {
        let has = |field: &str, needle: &Option<String>| {
            needle.as_ref().is_none_or(|n| {
                record[field].as_str().is_some_and(|v| v.to_lowercase().contains(n.as_str()))
            })
        };
        has("action", &self.action) && has("who", &self.who) && has("target", &self.target)
    }
}

/// One page of records, newest first, and the position to list the next (older) page from
/// when there are more.
#[derive(Debug, Default)]
pub struct Page {
    /// The records.
    pub records: Vec<Value>,
    /// The position of the last record listed, when older records pass the filter too.
    pub next: Option<Position>,
}

/// The file contents a walk starts from: the active file's bytes are read under the log's
/// lock, with the list of files, so a rotation cannot slip between the two.
pub(super) struct Snapshot {
    /// Every file, newest first, with its number; the active file's bytes when it was read.
    pub files: Vec<(u64, PathBuf, Option<Vec<u8>>)>,
}

/// The records of `snap` older than `before` (all when `None`) that `filter` keeps, newest
/// first, at most `limit` of them.
pub(super) fn walk(
    snap: Snapshot,
    before: Option<Position>,
    filter: &Filter,
    limit: usize,
) -> std::io::Result<Page> {
    let mut page = Page::default();
    let mut last = None;
    for (number, path, read) in snap.files {
        if before.is_some_and(|b| number > b.file) {
            continue;
        }
        let bytes = match read {
            Some(b) => b,
            None => match std::fs::read(&path) {
                Ok(b) => b,
                // A segment removed by retention since the list was made: older still.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            },
        };
        let end = match before {
            Some(b) if b.file == number => usize::try_from(b.offset).unwrap_or(usize::MAX),
            _ => usize::MAX,
        };
        let region = &bytes[..end.min(bytes.len())];
        let mut hi = region.len();
        while hi > 0 {
            let body_end = if region[hi - 1] == b'\n' { hi - 1 } else { hi };
            let start = region[..body_end].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            hi = start;
            // A line cut by a crash mid-write (not yet repaired) is skipped, not fatal.
            let Ok(record) = serde_json::from_slice::<Value>(&region[start..body_end]) else {
                continue;
            };
            if !filter.keeps(&record) {
                continue;
            }
            if page.records.len() == limit {
                // One more passes the filter: there is a next page.
                page.next = last;
                return Ok(page);
            }
            page.records.push(record);
            last = Some(Position { file: number, offset: start as u64 });
        }
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_read_back_as_written_and_bad_ones_are_refused() {
        let p = Position { file: 3, offset: 18_234 };
        assert_eq!(p.to_string(), "3-18234");
        assert_eq!("3-18234".parse::<Position>(), Ok(p));
        assert_eq!("0001-0".parse::<Position>(), Ok(Position { file: 1, offset: 0 }));
        for bad in
            ["", "3", "3-", "-3", "3.5", "a-1", "1-2-3", "+1-2", "1- 2", "99999999999999999999-1"]
        {
            assert!(bad.parse::<Position>().is_err(), "{bad:?}");
        }
        assert!(Position { file: 2, offset: 900 } < Position { file: 3, offset: 0 });
    }

    #[test]
    fn a_filter_matches_substrings_in_any_case_and_an_empty_one_keeps_all() {
        let r = serde_json::json!({"action": "queue.release", "who": "Otto", "target": "Q-17"});
        assert!(Filter::new(Some("RELEASE"), Some("ott"), Some("q-1")).keeps(&r));
        assert!(Filter::new(Some(""), None, Some("")).keeps(&r));
        assert!(!Filter::new(Some("purge"), None, None).keeps(&r));
        assert!(!Filter::new(None, Some("lena"), None).keeps(&r));
    }
}
