//! Where a refused config value is: [`ConfigError`] carries the message (naming the key and
//! the value received) and the byte span, and places it as `FILE:LINE:COL: message`.

use std::fmt;
use std::ops::Range;
use std::path::Path;

/// A refused config value: why (naming the key and the value received), and where it is in
/// the file's text when known. `Display` is the message, prefixed by `FILE:LINE:COL: ` (or
/// `FILE: ` without a position) once [`ConfigError::locate`] has placed it in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    message: String,
    span: Option<Range<usize>>,
    place: Option<String>,
}

impl ConfigError {
    /// An error with no position (a rule over the whole file).
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into(), span: None, place: None }
    }

    /// An error about the value at byte `span` of the source. An empty span (a default, not
    /// written in the file) has no position.
    pub fn at(span: Range<usize>, message: impl Into<String>) -> Self {
        let span = (!span.is_empty()).then_some(span);
        Self { message: message.into(), span, place: None }
    }

    /// The parser's error, with its position.
    pub fn from_toml(err: &toml::de::Error) -> Self {
        Self { message: err.message().trim_end().to_owned(), span: err.span(), place: None }
    }

    /// What is wrong, without the position.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The byte range of the offending value in the source, when known.
    pub fn span(&self) -> Option<Range<usize>> {
        self.span.clone()
    }

    /// The message prefixed with where the value is: its table (an array's entry by number
    /// and name: `[[gateway.route]] #2 (name = "S")`) and, unless the message already names
    /// it, `KEY = VALUE` as written in `source`. Run secrets through a redaction afterwards.
    pub fn in_context(mut self, source: &str) -> Self {
        let Some(span) = &self.span else { return self };
        let (table, key_value) = context(source, span.start);
        let Some(table) = table else {
            if let Some((key, value)) = key_value.filter(|(k, _)| !self.names(k)) {
                self.message = format!("{key} = {value}: {}", self.message);
            }
            return self;
        };
        let names_first = self.message.split_once(" = ").is_some_and(|(k, _)| !k.contains(' '));
        self.message = match key_value {
            // `[server] max_connections = 0: must be at least 1`
            _ if names_first => format!("{table} {}", self.message),
            Some((key, value)) if !self.names(&key) => {
                format!("{table} {key} = {value}: {}", self.message)
            }
            _ => format!("{table}: {}", self.message),
        };
        self
    }

    /// True when the message already says `key = …`.
    fn names(&self, key: &str) -> bool {
        self.message.contains(&format!("{key} ="))
    }

    /// Places the error in `file`, whose text is `source`: `Display` becomes
    /// `FILE:LINE:COL: message` (1-based line and column, the column counted in characters).
    pub fn locate(mut self, file: &Path, source: &str) -> Self {
        self.place = Some(match &self.span {
            Some(span) => {
                let (line, col) = line_col(source, span.start);
                format!("{}:{line}:{col}", file.display())
            }
            None => file.display().to_string(),
        });
        self
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.place {
            Some(place) => write!(f, "{place}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

impl From<toml::de::Error> for ConfigError {
    fn from(err: toml::de::Error) -> Self {
        Self::from_toml(&err)
    }
}

/// Formats a TOML error as `FILE:LINE:COL: message` (see [`ConfigError::locate`]).
pub fn located(file: &Path, source: &str, err: &toml::de::Error) -> String {
    ConfigError::from_toml(err).locate(file, source).to_string()
}

/// The longest value shown in an error's `KEY = VALUE`.
const MAX_SHOWN_VALUE: usize = 80;

/// The table holding byte `at` of `source` (`[t]`, or `[[t]] #n (name = …)` for an array's
/// n-th entry) and the `key` and value written on its line, read from the text: the last
/// header before `at`, and `key = value` when `at` is on such a line. A sub-table of an
/// array's entry (`[t.sub]` after `[[t]]`) belongs to that entry: the label is the entry's,
/// and the key is written `sub.key`.
fn context(source: &str, at: usize) -> (Option<String>, Option<(String, String)>) {
    let mut header: Option<(String, bool, usize)> = None; // name, array, index of its line
    let mut sub: Option<String> = None; // the sub-table of the array entry, when in one
    let mut entries: std::collections::HashMap<String, usize> = Default::default();
    let lines: Vec<(usize, &str)> = source
        .split_inclusive('\n')
        .scan(0, |offset, line| {
            let start = *offset;
            *offset += line.len();
            Some((start, line))
        })
        .collect();
    let mut here = None;
    for (i, (start, line)) in lines.iter().enumerate() {
        if *start > at {
            break;
        }
        here = Some(i);
        if let Some((name, array)) = header_of(line) {
            let entry = header.as_ref().filter(|(_, a, _)| *a).map(|(n, _, _)| n.as_str());
            if let Some(rest) = entry.and_then(|e| name.strip_prefix(e)?.strip_prefix('.'))
                && !array
            {
                sub = Some(rest.to_owned());
                continue;
            }
            if array {
                *entries.entry(name.clone()).or_default() += 1;
            }
            header = Some((name, array, i));
            sub = None;
        }
    }
    let table = header.map(|(name, array, first)| {
        if !array {
            return format!("[{name}]");
        }
        let n = entries.get(&name).copied().unwrap_or(1);
        let label = lines[first + 1..]
            .iter()
            .take_while(|(_, l)| header_of(l).is_none())
            .filter_map(|(_, l)| key_value(l))
            .find(|(k, _)| k == "name" || k == "match")
            .map(|(k, v)| format!(" ({k} = {v})"))
            .unwrap_or_default();
        format!("[[{name}]] #{n}{label}")
    });
    let kv =
        here.and_then(|i| lines.get(i)).and_then(|(_, l)| key_value(l)).map(|(k, v)| match &sub {
            Some(sub) => (format!("{sub}.{k}"), v),
            None => (k, v),
        });
    (table, kv)
}

/// `Some((name, is_array))` when `line` is a table header.
fn header_of(line: &str) -> Option<(String, bool)> {
    let t = line.trim();
    let (inner, array) = match t.strip_prefix("[[") {
        Some(rest) => (rest.split_once("]]")?.0, true),
        None => (t.strip_prefix('[')?.split_once(']')?.0, false),
    };
    let name = inner.trim();
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ' ' | '"'));
    plain.then(|| (name.to_owned(), array))
}

/// The key and value of a `key = value` line, the value as written (without a trailing
/// comment when it is not quoted), cut to [`MAX_SHOWN_VALUE`] characters.
fn key_value(line: &str) -> Option<(String, String)> {
    let (key, value) = line.split_once('=')?;
    let key = key.trim();
    let bare = !key.is_empty()
        && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '"'));
    if !bare {
        return None;
    }
    let mut value = value.trim();
    if !value.starts_with(['"', '\'']) {
        value = value.split(" #").next().unwrap_or(value).trim_end();
    }
    let shown: String = value.chars().take(MAX_SHOWN_VALUE).collect();
    let shown = if shown.len() < value.len() { format!("{shown}…") } else { shown };
    Some((key.to_owned(), shown))
}

/// 1-based line and column of byte `offset` in `source`.
pub fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(source.len());
    let before = source.get(..offset).unwrap_or(source);
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before.get(line_start..).map_or(1, |s| s.chars().count() + 1);
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sub_table_of_an_array_entry_is_labelled_with_the_entry() {
        let src = "[[r]]\nname = \"A\"\n[[r]]\nname = \"B\"\n[r.delivery]\nbasic = 5\n[s]\nx = 1\n";
        let at = src.find("5").unwrap();
        let e = ConfigError::at(at..at + 1, "invalid type").in_context(src);
        assert_eq!(e.message(), "[[r]] #2 (name = \"B\") delivery.basic = 5: invalid type");
        let at = src.find("1\n").unwrap();
        let e = ConfigError::at(at..at + 1, "no").in_context(src);
        assert_eq!(e.message(), "[s] x = 1: no");
    }
}
