//! Standard output of the one-shot commands (`check`, `counters`, `queue`, `edi`, `backup`,
//! `simulate`, `advise`). A reader that stops early (`tollgate counters list | head`) ends the
//! command with exit 0, as a pipeline expects; any other write error (a full disk behind `>`)
//! ends it with exit 1 and says so. `println!` panics on both.

use std::fmt;
use std::io::{self, StdoutLock, Write};

/// Writes `text` and a newline to standard output, or ends the process as the module says.
pub fn line(text: fmt::Arguments<'_>) {
    or_end(write(|out| out.write_fmt(text).and_then(|()| out.write_all(b"\n"))));
}

/// Writes `text` as it is (no newline added) to standard output, or ends the process.
pub fn text(text: fmt::Arguments<'_>) {
    or_end(write(|out| out.write_fmt(text)));
}

/// Writes `bytes` to standard output; a reader gone away ends the process with 0, and any
/// other error is the caller's to report (`edi` has an exit-code scheme of its own).
pub fn bytes(bytes: &[u8]) -> io::Result<()> {
    write(|out| out.write_all(bytes))
}

/// Writes one status line for a running service (`serve`'s "listening on"): a service whose
/// standard output was closed goes on serving, so a write error here is ignored.
pub fn announce(text: fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    let _ = out.write_fmt(text).and_then(|()| out.write_all(b"\n")).and_then(|()| out.flush());
}

/// Runs `put` on the locked standard output and flushes it; exits 0 on a broken pipe.
fn write(put: impl FnOnce(&mut StdoutLock<'static>) -> io::Result<()>) -> io::Result<()> {
    let mut out = io::stdout().lock();
    let written = put(&mut out).and_then(|()| out.flush());
    drop(out);
    match written {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => other,
    }
}

fn or_end(written: io::Result<()>) {
    if let Err(e) = written {
        let _ = writeln!(io::stderr(), "error: cannot write to standard output: {e}");
        std::process::exit(1);
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
