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

/// 1-based line and column of byte `offset` in `source`.
pub fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(source.len());
    let before = source.get(..offset).unwrap_or(source);
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before.get(line_start..).map_or(1, |s| s.chars().count() + 1);
    (line, col)
}
