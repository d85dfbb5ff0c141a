//! Traffic history: what partners sent, one row per interchange (time, partner, document,
//! records), read from a CSV export of a message log or from a gateway's own record of the
//! items it delivered.
//!
//! The CSV has a header row naming the columns `time` (RFC 3339), `partner`, `document` and
//! `records`, in any order (other columns are ignored, names are matched without regard to
//! case); rows may come in any order. Fields may be quoted (`"a,b"`, `""` for a quote); a
//! quoted field may not span lines. Bounded: at most [`MAX_ROWS`] rows of at most
//! [`MAX_LINE`] bytes each, and [`MAX_DAYS`] days from the first row to the last.

use std::borrow::Cow;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crate::scenario::InputError;

/// The most rows a history may have.
pub(crate) const MAX_ROWS: usize = 5_000_000;
/// The longest line, in bytes.
pub(crate) const MAX_LINE: usize = 64 * 1024;
/// The longest span of a history, in days.
pub(crate) const MAX_DAYS: i64 = 400;

/// One interchange of the history.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Row {
    /// When it was sent (Unix ms).
    pub at_ms: i64,
    /// The partner's name.
    pub partner: String,
    /// Its document type.
    pub document: String,
    /// Its records (the weight a route counts).
    pub records: u32,
}

/// The fields of a CSV line, trimmed unless quoted. A line without quotes (nearly every line
/// of a history) is cut where it stands; its fields are borrowed, not copied.
fn split_csv(line: &str) -> Result<Vec<Cow<'_, str>>, String> {
    if !line.contains('"') {
        return Ok(line.split(',').map(|f| Cow::Borrowed(f.trim())).collect());
    }
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut was_quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                cur.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => cur.push(c),
            (false, '"') if cur.trim().is_empty() => {
                cur.clear();
                quoted = true;
                was_quoted = true;
            }
            (false, ',') => {
                let field =
                    if was_quoted { std::mem::take(&mut cur) } else { cur.trim().to_owned() };
                out.push(Cow::Owned(field));
                cur.clear();
                was_quoted = false;
            }
            (false, c) => cur.push(c),
        }
    }
    if quoted {
        return Err("a quoted field is not closed on this line".into());
    }
    out.push(Cow::Owned(if was_quoted { cur } else { cur.trim().to_owned() }));
    Ok(out)
}

/// Reads a CSV history from `path`.
pub(crate) fn read_csv(path: &Path) -> Result<Vec<Row>, InputError> {
    let file = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| InputError {
        file: file.clone(),
        line: 0,
        field: "(file)".into(),
        message: format!("cannot read: {e}"),
    })?;
    parse_csv(&file, f)
}

/// Reads a CSV history from `input`; `file` names it in errors.
pub fn parse_csv(file: &str, input: impl Read) -> Result<Vec<Row>, InputError> {
    let err = |line: usize, field: &str, message: String| InputError {
        file: file.to_owned(),
        line,
        field: field.to_owned(),
        message,
    };
    let mut reader = BufReader::new(input.take(u64::MAX));
    let mut buf = Vec::new();
    let mut n = 0usize;
    let mut cols: Option<[usize; 4]> = None;
    let mut rows = Vec::new();
    loop {
        buf.clear();
        let got = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| err(n + 1, "(file)", format!("cannot read: {e}")))?;
        if got == 0 {
            break;
        }
        n += 1;
        if buf.len() > MAX_LINE {
            return Err(err(n, "(line)", format!("longer than {MAX_LINE} bytes")));
        }
        let text = std::str::from_utf8(&buf)
            .map_err(|_| err(n, "(line)", "not UTF-8 text".into()))?
            .trim_end_matches(['\n', '\r']);
        let text = if n == 1 { text.trim_start_matches('\u{feff}') } else { text };
        if text.trim().is_empty() {
            continue;
        }
        let fields = split_csv(text).map_err(|m| err(n, "(line)", m))?;
        let Some(idx) = cols else {
            let names: Vec<String> = fields.iter().map(|f| f.trim().to_lowercase()).collect();
            let mut idx = [0usize; 4];
            for (k, want) in ["time", "partner", "document", "records"].iter().enumerate() {
                idx[k] = names.iter().position(|c| c == want).ok_or_else(|| {
                    err(n, want, format!("the header {names:?} has no {want:?} column"))
                })?;
            }
            cols = Some(idx);
            continue;
        };
        if rows.len() >= MAX_ROWS {
            return Err(err(n, "(line)", format!("more than {MAX_ROWS} rows")));
        }
        let get = |k: usize, name: &str| {
            fields.get(idx[k]).ok_or_else(|| {
                err(n, name, format!("missing: the row has {} field(s)", fields.len()))
            })
        };
        let time = get(0, "time")?;
        let at = time
            .parse::<jiff::Timestamp>()
            .map_err(|e| err(n, "time", format!("{time:?} is not an RFC 3339 time: {e}")))?;
        let partner = get(1, "partner")?;
        if partner.is_empty()
            || partner.len() > 64
            || !partner.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(err(
                n,
                "partner",
                format!("{partner:?}: letters, digits, '-', '_' or '.', at most 64"),
            ));
        }
        let document = get(2, "document")?;
        let x12 = document.len() == 3 && document.chars().all(|c| c.is_ascii_digit());
        let edifact =
            (3..=6).contains(&document.len()) && document.chars().all(|c| c.is_ascii_uppercase());
        if !(x12 || edifact) {
            return Err(err(
                n,
                "document",
                format!("{document:?} is not an X12 number (\"214\") or EDIFACT name (\"IFTSTA\")"),
            ));
        }
        let records = get(3, "records")?;
        let records =
            records.parse::<u32>().ok().filter(|r| (1..=10_000).contains(r)).ok_or_else(|| {
                err(n, "records", format!("{records:?} is not a count in 1..=10000"))
            })?;
        rows.push(Row {
            at_ms: at.as_millisecond(),
            partner: partner.to_string(),
            document: document.to_string(),
            records,
        });
    }
    if cols.is_none() {
        return Err(err(0, "(header)", "empty: no header row".into()));
    }
    if rows.is_empty() {
        return Err(err(0, "(rows)", "no rows after the header".into()));
    }
    check_span(file, &mut rows)?;
    Ok(rows)
}

/// Sorts `rows` by time and checks the span.
pub(crate) fn check_span(file: &str, rows: &mut [Row]) -> Result<(), InputError> {
    rows.sort();
    let span = rows.last().map_or(0, |r| r.at_ms) - rows.first().map_or(0, |r| r.at_ms);
    if span > MAX_DAYS * 86_400_000 {
        return Err(InputError {
            file: file.to_owned(),
            line: 0,
            field: "time".into(),
            message: format!("the rows span {} days; at most {MAX_DAYS}", span / 86_400_000),
        });
    }
    Ok(())
}

/// The delivered items a stopped gateway keeps in `data_dir` (its state database, read only),
/// as history rows: receive time, partner, document, weight.
pub(crate) fn from_queue(data_dir: &Path) -> Result<Vec<Row>, String> {
    let items = tollgate_gateway::delivered_items(data_dir).map_err(|e| e.to_string())?;
    let mut rows: Vec<Row> = items
        .into_iter()
        .filter(|i| i.partner.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
        .map(|i| Row {
            at_ms: i.received_at,
            partner: i.partner,
            document: i.document,
            records: u32::try_from(i.weight.clamp(1, 10_000)).unwrap_or(1),
        })
        .collect();
    if rows.is_empty() {
        return Err(format!("{}: the gateway's state holds no delivered item", data_dir.display()));
    }
    check_span(&data_dir.display().to_string(), &mut rows).map_err(|e| e.to_string())?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_in_any_order_and_quoted_fields() {
        let csv = "records,Partner,extra,time,document\n3,A,\"x, y\",2026-01-01T00:10:00Z,214\n1,B,,2026-01-01T00:00:00Z,IFTSTA\n";
        let rows = parse_csv("h.csv", csv.as_bytes()).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].partner.as_str(), rows[0].records), ("B", 1));
        assert_eq!((rows[1].partner.as_str(), rows[1].document.as_str()), ("A", "214"));
        // Unquoted fields are trimmed, with or without a quote elsewhere on the line; quoted
        // ones are kept as they are.
        let csv = "time,partner,document,records\n 2026-01-01T00:00:00Z , C , 214 , 2 \n\
                   2026-01-01T00:01:00Z, D ,\"214\",3\n";
        let rows = parse_csv("h.csv", csv.as_bytes()).unwrap();
        assert_eq!((rows[0].partner.as_str(), rows[0].records), ("C", 2));
        assert_eq!((rows[1].partner.as_str(), rows[1].document.as_str()), ("D", "214"));
        let csv = "time,partner,document,records\n2026-01-01T00:00:00Z,\"C \",214,2\n";
        let e = parse_csv("h.csv", csv.as_bytes()).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "partner"), "{e}");
    }

    #[test]
    fn bad_rows_name_line_and_field() {
        let csv = "time,partner,document,records\n2026-01-01T00:00:00Z,A,214,2\n2026-01-01T00:00:00Z,A,214,many\n";
        let e = parse_csv("h.csv", csv.as_bytes()).unwrap_err();
        assert_eq!((e.file.as_str(), e.line, e.field.as_str()), ("h.csv", 3, "records"), "{e}");
        assert!(e.message.contains("many"), "{e}");
        let e = parse_csv("h.csv", "time,partner,records\n".as_bytes()).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (1, "document"), "{e}");
        let csv = "time,partner,document,records\nyesterday,A,214,2\n";
        let e = parse_csv("h.csv", csv.as_bytes()).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "time"), "{e}");
    }
}
