//! Splitting keeps its promise on any input the parser reads, not only on clean interchanges:
//! every piece is one well-formed interchange that the parser reads back (as `tollgate edi
//! inspect` does) with no error its source did not have, holding the source's transactions.
//! The oracle is [`tollgate_edi::self_check_split`]; here it meets short headers written
//! by hand and, as a property, the fixtures and fuzz seeds with their headers cut short and
//! random bytes changed.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use tollgate_edi::parse;
use tollgate_edi::self_check_split;
use tollgate_edi::split;

fn codes(ic: &tollgate_edi::Interchange) -> Vec<&str> {
    ic.errors.iter().map(|e| e.code.as_str()).collect()
}

#[test]
fn a_unb_without_control_reference_gets_one_in_every_piece() {
    let text = "UNB+UNOA:3'UNH+1+ORDERS:D:96A:UN'BGM+220+1+9'UNT+3+1'\
                UNH+2+ORDERS:D:96A:UN'BGM+220+2+9'UNT+3+2'UNZ+2'";
    let p = parse(text.as_bytes());
    let ic = &p.interchanges[0];
    assert_eq!(codes(ic), ["UCI-13", "UCI-13", "UCI-13"], "S002, S003 and 0020 are missing");
    for t in 0..2 {
        let piece = split(text.as_bytes(), ic, &[t], "5").unwrap();
        let piece_text = String::from_utf8(piece.clone()).unwrap();
        assert!(piece_text.starts_with("UNB+UNOA:3++++5'"), "{piece_text}");
        assert!(piece_text.ends_with("UNZ+1+5'\n"), "{piece_text}");
        let back = parse(&piece);
        let b = &back.interchanges[0];
        assert_eq!(b.control_number.as_str(), "5");
        // S002 and S003 are still missing, as in the source; 0020 now matches UNZ.
        assert_eq!(codes(b), ["UCI-13", "UCI-13"], "{piece_text}");
    }
    self_check_split(text.as_bytes());
}

#[test]
fn a_group_reference_holding_a_delimiter_is_repeated_as_written_in_the_trailer() {
    // GS06 is `>`, the component separator: read as text it cannot be written back without a
    // substitute, so the rebuilt GE02 repeats the header's bytes instead.
    let text = "ISA*00*          *00*          *ZZ*SENDER         *ZZ*RECEIVER       *240102*0930*U*00401*000000001*0*P*>~\
                GS*QM*SENDER*RECEIVER*20240102*0930*>*X*004010~\
                ST*214*0001~B10*PRO1*S1*SCAC~SE*3*0001~\
                ST*214*0002~B10*PRO2*S2*SCAC~SE*3*0002~GE*2*>~IEA*1*000000001~";
    let p = parse(text.as_bytes());
    let ic = &p.interchanges[0];
    assert_eq!(codes(ic), Vec::<&str>::new());
    for t in 0..2 {
        let piece = split(text.as_bytes(), ic, &[t], "5").unwrap();
        let piece_text = String::from_utf8(piece.clone()).unwrap();
        assert!(piece_text.contains("GE*1*>~"), "{piece_text}");
        let back = parse(&piece);
        assert_eq!(codes(&back.interchanges[0]), Vec::<&str>::new(), "{piece_text}");
    }
    self_check_split(text.as_bytes());
}

#[test]
fn an_isa_cut_short_by_its_terminator_is_rebuilt_whole_in_every_piece() {
    // The segment terminator is a line feed, and one also sits inside ISA10: the ISA as a
    // segment ends there, with 10 of its 16 elements (TA1 022), and what follows it is a
    // stray segment.
    let text = "ISA*00*          *00*          *ZZ*SENDER         *ZZ*RECEIVER       *240102*09\n\
                30*U*00401*000000001*0*P*>\n\
                GS*QM*SENDER*RECEIVER*20240102*0930*7*X*004010\n\
                ST*214*0001\nB10*PRO1*S1*SCAC\nSE*3*0001\n\
                ST*214*0002\nB10*PRO2*S2*SCAC\nSE*3*0002\n\
                GE*2*7\nIEA*1*000000001\n";
    let p = parse(text.as_bytes());
    let ic = &p.interchanges[0];
    assert!(codes(ic).contains(&"TA1-022"), "{:?}", ic.errors);
    for t in 0..2 {
        let piece = split(text.as_bytes(), ic, &[t], "5").unwrap();
        let piece_text = String::from_utf8(piece.clone()).unwrap();
        let back = parse(&piece);
        assert!(back.errors.is_empty(), "{piece_text}\n{:?}", back.errors);
        assert_eq!(back.interchanges.len(), 1, "{piece_text}");
        let b = &back.interchanges[0];
        let isa = piece_text.lines().next().unwrap();
        assert_eq!(isa.split('*').count(), 17, "{isa}");
        assert!(isa.ends_with("*09*U**000000005***>"), "{isa}");
        for code in codes(b) {
            assert!(codes(ic).contains(&code), "{code} is new: {piece_text}\n{:?}", b.errors);
        }
        assert!(!codes(b).contains(&"TA1-022"), "{piece_text}");
        let tx: Vec<_> = b.transactions().map(|t| t.control_number.as_str()).collect();
        assert_eq!(tx, [["0001"], ["0002"]][t]);
    }
    self_check_split(text.as_bytes());
}

fn files_below(dir: &Path, out: &mut Vec<Vec<u8>>) {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files_below(&path, out);
        } else if path.extension().is_some_and(|e| e == "edi") {
            out.push(std::fs::read(&path).unwrap());
        }
    }
}

/// The project's fixtures and the fuzz seeds.
fn inputs() -> Vec<Vec<u8>> {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let mut out = Vec::new();
    files_below(&root.join("testdata/edi"), &mut out);
    files_below(&root.join("fuzz/seeds/parse"), &mut out);
    out
}

/// Cuts the header (`ISA` / `UNB`) starting at or after `at` short: its elements from the
/// `keep`-th on are removed, up to the first `~`, `'`, line feed or 0x1C after them.
fn cut_header(data: &mut Vec<u8>, at: usize, keep: usize) {
    let from = at.min(data.len());
    let Some(start) =
        data[from..].windows(3).position(|w| w == b"ISA" || w == b"UNB").map(|i| from + i)
    else {
        return;
    };
    let Some(&sep) = data.get(start + 3) else {
        return;
    };
    let mut seen = 0;
    let mut cut = None;
    for (i, &b) in data.iter().enumerate().skip(start + 3) {
        if b == sep {
            seen += 1;
            if seen == keep + 1 {
                cut = Some(i);
            }
        }
        if let Some(c) = cut
            && matches!(b, b'~' | b'\'' | b'\n' | 0x1C)
        {
            data.drain(c..i);
            return;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Each piece of any interchange the parser reads is read back with no error the source
    /// did not have and holds the source's transactions, also when the header is short and
    /// bytes anywhere were changed.
    #[test]
    fn every_piece_is_at_least_as_valid_as_its_source(
        which in 0usize..64,
        cuts in prop::collection::vec((0usize..4096, 0usize..17), 0..3),
        edits in prop::collection::vec(
            (0usize..4096, 0u8..3, prop::sample::select(
                b"~*>:+'?\r\n\x1c\x1d\x1eISAUNBGSEST0 ".to_vec()
            )),
            0..4,
        ),
    ) {
        let inputs = inputs();
        let mut data = inputs[which % inputs.len()].clone();
        for (at, keep) in cuts {
            cut_header(&mut data, at, keep);
        }
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
        self_check_split(&data);
    }
}
