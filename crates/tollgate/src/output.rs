//! Standard output of the one-shot commands (`check`, `counters`, `queue`, `edi`, `backup`,
//! `simulate`, `advise`). A reader that stops early (`tollgate counters list | head`) ends the
//! command quietly, and any other write error (a full disk behind `>`) ends it with a message;
//! `println!` panics on both. Commands whose exit code carries no finding exit 0 and 1
//! ([`line()`], [`text()`]); `check` and `edi` keep their own codes ([`try_text`], [`try_bytes`]).

use std::fmt;
use std::io::{self, StdoutLock, Write};

/// Why standard output took nothing more.
#[derive(Debug)]
pub enum Unwritten {
    /// The reader went away (a closed pipe): nothing more can be shown.
    ReaderGone,
    /// Any other error, e.g. a full disk.
    Failed(io::Error),
}

impl fmt::Display for Unwritten {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ReaderGone => f.write_str("the reader went away"),
            Self::Failed(e) => write!(f, "{e}"),
        }
    }
}

/// `text` with its control characters but newlines written as escapes (`\u{1b}`): tables that
/// show partner text (sender ids, reasons) must not let a partner's file drive the
/// operator's terminal (clear it, retitle it, write the clipboard).
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\n') {
        return text.into();
    }
    let escaped = text.chars().map(|c| match c {
        '\n' => "\n".to_owned(),
        c if c.is_control() => c.escape_unicode().to_string(),
        c => c.to_string(),
    });
    escaped.collect::<String>().into()
}

/// Writes `text` and a newline to standard output, or ends the process: 0 when the reader
/// went away, 1 with a message otherwise.
pub fn line(text: fmt::Arguments<'_>) {
    or_end(write(|out| out.write_fmt(text).and_then(|()| out.write_all(b"\n"))));
}

/// Writes `text` as it is (no newline added) to standard output, or ends the process as
/// [`line()`] does.
pub fn text(text: fmt::Arguments<'_>) {
    or_end(try_text(text));
}

/// Writes `text` as it is to standard output; why not, for a caller with exit codes of its own.
pub fn try_text(text: fmt::Arguments<'_>) -> Result<(), Unwritten> {
    write(|out| out.write_fmt(text))
}

/// Writes `bytes` to standard output; why not, for a caller with exit codes of its own.
pub fn try_bytes(bytes: &[u8]) -> Result<(), Unwritten> {
    write(|out| out.write_all(bytes))
}

/// Writes one status line for a running service (`serve`'s "listening on"): a service whose
/// standard output was closed goes on serving, so a write error here is ignored.
pub fn announce(text: fmt::Arguments<'_>) {
    let _ = write(|out| out.write_fmt(text).and_then(|()| out.write_all(b"\n")));
}

/// Runs `put` on the locked standard output and flushes it.
fn write(put: impl FnOnce(&mut StdoutLock<'static>) -> io::Result<()>) -> Result<(), Unwritten> {
    let mut out = io::stdout().lock();
    put(&mut out).and_then(|()| out.flush()).map_err(|e| match e.kind() {
        io::ErrorKind::BrokenPipe => Unwritten::ReaderGone,
        _ => Unwritten::Failed(e),
    })
}

fn or_end(written: Result<(), Unwritten>) {
    match written {
        Ok(()) => {}
        Err(Unwritten::ReaderGone) => std::process::exit(0),
        Err(Unwritten::Failed(e)) => {
            let _ = writeln!(io::stderr(), "error: cannot write to standard output: {e}");
            std::process::exit(1);
        }
    }
}

/// `println!` for the one-shot commands, through [`line()`].
macro_rules! outln {
    ($($arg:tt)*) => { $crate::output::line(format_args!($($arg)*)) };
}

/// `print!` for the one-shot commands, through [`text()`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::text(format_args!($($arg)*)) };
}

pub(crate) use {out, outln};
