//! Fuzz target: any bytes through the parser, the streaming reader, acknowledgements and split,
//! with the consistency checks of `tollgate_edi::selfcheck`.
//!
//! Run with `cargo +nightly fuzz run parse fuzz/seeds/parse` from the repository root.
#![no_main]
#![forbid(unsafe_code)]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tollgate_edi::selfcheck::check(data);
});
