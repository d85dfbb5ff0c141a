//! Replays the fuzz target's seed corpus (`fuzz/seeds/parse`) through the same checks the fuzz
//! target runs, plus every prefix of every seed (a premature end of file at each byte).

use std::path::PathBuf;

/// The seed corpus's folder.
fn seed_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/seeds/parse"))
}

#[test]
fn fuzz_seeds_and_all_their_prefixes_pass_the_self_checks() {
    let dir = seed_dir();
    let mut seeds = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        tollgate_edi::self_check(&bytes);
        for cut in 0..bytes.len() {
            tollgate_edi::self_check(&bytes[..cut]);
        }
        seeds += 1;
    }
    assert!(seeds >= 15, "only {seeds} seeds in {}", dir.display());
}

#[test]
fn seeds_cover_clean_and_broken_input() {
    let dir = seed_dir();
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    assert!(!tollgate_edi::parse(&read("x12-basic.edi")).has_errors());
    assert!(!tollgate_edi::parse(&read("edifact-una-groups.edi")).has_errors());
    let wrong = tollgate_edi::parse(&read("x12-wrong-trailers.edi"));
    let codes: Vec<_> = wrong.interchanges[0].errors.iter().map(|e| e.code.as_str()).collect();
    assert_eq!(codes, ["AK5-4", "AK5-3", "AK9-5", "AK9-4", "TA1-021", "TA1-001"]);
}

/// A mutation the proptest below found: a line break inserted before ISA16 is skipped when the
/// delimiters are read, but ends the ISA segment, so the source's ISA16 is empty. The piece
/// must still carry the component separator the source was read with.
#[test]
fn a_line_break_before_isa16_still_splits_into_readable_pieces() {
    let dir = seed_dir();
    let mut data = std::fs::read(dir.join("x12-lf-terminator-control-chars.edi")).unwrap();
    data.insert(104, b'\n');
    data[4] = b'~';
    let parsed = tollgate_edi::parse(&data);
    let codes: Vec<_> = parsed.interchanges[0].errors.iter().map(|e| e.code.as_str()).collect();
    assert!(codes.contains(&"TA1-027"), "the source's ISA16 is reported empty: {codes:?}");
    tollgate_edi::self_check(&data);
}

/// Another: a line break inside a three-byte terminator (`…`) leaves the group header
/// unterminated in the source; removing the line break in the piece must not mend it.
#[test]
fn a_line_break_inside_a_multibyte_terminator_stays_in_the_piece() {
    let dir = seed_dir();
    let mut data = std::fs::read(dir.join("x12-ellipsis-terminator.edi")).unwrap();
    let at = data.windows(9).position(|w| w == "004010…".as_bytes()).unwrap() + 7;
    data.insert(at, b'\r');
    let parsed = tollgate_edi::parse(&data);
    assert_eq!(parsed.interchanges[0].transactions().count(), 1, "ST 0001 is inside the GS");
    tollgate_edi::self_check(&data);
}

mod mutations {
    use proptest::prelude::*;

    fn seeds() -> Vec<Vec<u8>> {
        let dir = super::seed_dir();
        let mut files: Vec<_> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        files.iter().map(|p| std::fs::read(p).unwrap()).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

        /// Seeds with random bytes overwritten, inserted or deleted (interesting bytes are
        /// favoured: delimiters, line breaks, release characters) pass the self-checks.
        #[test]
        fn mutated_seeds_pass_the_self_checks(
            which in 0usize..64,
            edits in prop::collection::vec(
                (0usize..4096, 0u8..3, prop::sample::select(
                    b"~*>:+'?\r\n\x1c\x1d\x1eISAUNBGSEST0 ".to_vec()
                )),
                1..6,
            ),
        ) {
            let seeds = seeds();
            let mut data = seeds[which % seeds.len()].clone();
            for (at, op, byte) in edits {
                let at = at % (data.len() + 1);
                match op {
                    0 if at < data.len() => data[at] = byte,
                    1 => data.insert(at, byte),
                    _ if at < data.len() => {
                        data.remove(at);
                    }
                    _ => data.push(byte),
                }
            }
            tollgate_edi::self_check(&data);
        }
    }
}
