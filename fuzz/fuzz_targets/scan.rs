//! Fuzz target: the zero-allocation segment scanner alone, the hot path of every parse. The
//! first bytes choose the delimiters; the scanner must yield segments in order, inside the
//! input, each ending at a terminator that is not released, and never loop or panic.
#![no_main]
#![forbid(unsafe_code)]

use tollgate_edi::{Delimiters, SegmentScanner};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let [element, component, terminator, release, rest @ ..] = data else { return };
    let delimiters = if *release == 0 {
        Delimiters::x12(*element, *component, None, &[*terminator])
    } else {
        Delimiters::edifact(*component, *element, b'.', Some(*release), None, *terminator)
    };
    let Some(d) = delimiters else { return };
    let base = 7;
    let mut scanner = SegmentScanner::with_base(rest, base, d);
    let mut last_end = base;
    let mut count = 0usize;
    while let Some(seg) = scanner.next_segment() {
        assert!(seg.offset >= last_end, "segments move forward");
        assert!(seg.end <= base + rest.len(), "segment inside the input");
        assert!(!seg.bytes.is_empty(), "empty segments are skipped");
        assert_eq!(rest[seg.end - base - 1], *terminator, "a segment ends at its terminator");
        last_end = seg.end;
        count += 1;
        assert!(count <= rest.len(), "no more segments than bytes");
    }
    if let Some(tail) = scanner.take_tail() {
        assert!(tail.offset >= last_end && tail.end <= base + rest.len());
    }
});
