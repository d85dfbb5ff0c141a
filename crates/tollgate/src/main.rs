//! The `tollgate` command.
#![forbid(unsafe_code)]

fn main() {}
