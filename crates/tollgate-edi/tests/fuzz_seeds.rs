//! Replays the fuzz target's seed corpus (`fuzz/seeds/parse`) through the same checks the fuzz
//! target runs, plus every prefix of every seed (a premature end of file at each byte).

use std::path::PathBuf;

#[test]
fn fuzz_seeds_and_all_their_prefixes_pass_the_self_checks() {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/seeds/parse"));
    let mut seeds = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        tollgate_edi::selfcheck::check(&bytes);
        for cut in 0..bytes.len() {
            tollgate_edi::selfcheck::check(&bytes[..cut]);
        }
        seeds += 1;
    }
    assert!(seeds >= 15, "only {seeds} seeds in {}", dir.display());
}

#[test]
fn seeds_cover_clean_and_broken_input() {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/seeds/parse"));
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    assert!(!tollgate_edi::parse(&read("x12-basic.edi")).has_errors());
    assert!(!tollgate_edi::parse(&read("edifact-una-groups.edi")).has_errors());
    let wrong = tollgate_edi::parse(&read("x12-wrong-trailers.edi"));
    let codes: Vec<_> = wrong.interchanges[0].errors.iter().map(|e| e.code.as_str()).collect();
    assert_eq!(codes, ["AK5-4", "AK5-3", "AK9-5", "AK9-4", "TA1-021", "TA1-001"]);
}
