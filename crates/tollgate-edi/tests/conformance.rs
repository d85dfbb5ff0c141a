//! Agreement with the X12 and ISO 9735 rules on points where other parsers and the standards
//! were found to differ from an earlier reading: layout whitespace, control references as
//! text, 997 against 999, real ISA dates and times, splitting a truncated interchange, code
//! lists in acknowledgements, and EDIFACT level B and UNOY interchanges.

use std::path::PathBuf;

use tollgate_edi::{AckFormat, acknowledge};
use tollgate_edi::{ParsedFile, parse};
use tollgate_edi::{SplitError, split};

fn fixture(rel: &str) -> Vec<u8> {
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/edi")).join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn codes(p: &ParsedFile) -> Vec<String> {
    p.interchanges.iter().flat_map(|ic| ic.errors.iter().map(|e| e.code.clone())).collect()
}

/// An X12 interchange: ISA09 `date`, ISA10 `time`, GS08 `gs08`, and the given body segments
/// between GS and GE (terminated by `~\n`).
fn x12(date: &str, time: &str, gs08: &str, body: &[&str]) -> String {
    let mut s = format!(
        "ISA*00*          *00*          *ZZ*SWIFTLINE      *ZZ*ACMECORP       *{date}*{time}*U*00401*000000077*0*P*>~\n\
         GS*QM*SWIFTLINE*ACMECORP*20261130*1200*77*X*{gs08}~\n"
    );
    for seg in body {
        s.push_str(seg);
        s.push_str("~\n");
    }
    s.push_str("GE*1*77~\nIEA*1*000000077~\n");
    s
}

const TX_214: [&str; 3] = ["ST*214*0001", "B10*PRO1*S1*SWFT", "SE*3*0001"];

fn ack(text: &str) -> String {
    let p = parse(text.as_bytes());
    let a = acknowledge(text.as_bytes(), &p.interchanges[0], AckFormat::Auto, 9).expect("an ack");
    String::from_utf8(a).unwrap()
}

#[test]
fn spaces_and_tabs_after_terminators_are_layout_in_x12() {
    let p = parse(&fixture("x12/850-space-after-terminator.edi"));
    assert!(!p.has_errors(), "{p:?}");
    let ic = &p.interchanges[0];
    assert_eq!(ic.groups.len(), 1);
    assert_eq!(ic.groups[0].transactions[0].kind, "850");
    assert_eq!(ic.groups[0].transactions[0].segments, 5);
    assert!(ic.complete);
}

#[test]
fn spaces_and_tabs_after_terminators_are_layout_in_edifact() {
    let p = parse(&fixture("edifact/orders-space-after-terminator.edi"));
    assert!(!p.has_errors(), "{p:?}");
    let ic = &p.interchanges[0];
    let tx = ic.transactions().next().unwrap();
    assert_eq!((tx.kind.as_str(), tx.segments), ("ORDERS", 4));
    assert!(ic.complete);
}

#[test]
fn transaction_references_are_compared_as_text() {
    // ST02 `000121` and SE02 `0000121` are different strings: AK5 code 3.
    let text = x12("261130", "1200", "004010", &["ST*214*000121", "B10*1*2*SWFT", "SE*3*0000121"]);
    let p = parse(text.as_bytes());
    assert_eq!(codes(&p), ["AK5-3"]);
    assert!(p.interchanges[0].errors[0].message.contains("`0000121`"));
    // GS06 / GE02 and ISA13 / IEA02 are numbers: `77` and `000077` agree.
    let numeric = text.replace("GE*1*77~", "GE*1*000077~").replace("IEA*1*000000077", "IEA*1*77");
    let numeric = numeric.replace("SE*3*0000121", "SE*3*000121");
    assert!(!parse(numeric.as_bytes()).has_errors());
}

#[test]
fn edifact_message_and_group_references_are_compared_as_text() {
    let text = "UNB+UNOA:3+S:ZZZ+R:ZZZ+261130:1200+9'UNG+ORDERS+S:ZZZ+R:ZZZ+261130:1200+01+UN+D:96A'\
                UNH+0001+ORDERS:D:96A:UN'BGM+220+1+9'UNT+3+1'UNE+1+1'UNZ+1+9'";
    let p = parse(text.as_bytes());
    assert_eq!(codes(&p), ["UCM-28", "UCF-28"]);
    let a = ack(text);
    assert!(a.contains("UCM+0001+ORDERS:D:96A:UN+4+28'"), "{a}");
}

#[test]
fn a_999_only_for_gs08_from_005010() {
    for (gs08, st) in [
        ("005010X214", "ST*999*0001"),
        ("004010", "ST*997*0001"),
        ("00204", "ST*997*0001"),
        ("4010", "ST*997*0001"),
        ("UNKNOWN", "ST*997*0001"),
    ] {
        let a = ack(&x12("261130", "1200", gs08, &TX_214));
        assert!(a.contains(st), "GS08 {gs08}: {a}");
    }
}

#[test]
fn isa_date_and_time_must_be_real() {
    let p = parse(x12("261130", "3339", "004010", &TX_214).as_bytes());
    assert_eq!(codes(&p), ["TA1-015"]);
    assert!(p.interchanges[0].errors[0].message.contains("`3339`"));
    let p = parse(x12("261131", "1200", "004010", &TX_214).as_bytes());
    assert_eq!(codes(&p), ["TA1-014"]);
    let p = parse(x12("240229", "2359", "004010", &TX_214).as_bytes());
    assert!(!p.has_errors(), "29 February of a leap year");
    // The TA1 carries the note code.
    let a = ack(&x12("261130", "2460", "004010", &TX_214));
    assert!(a.contains("*R*015~"), "{a}");
}

#[test]
fn a_truncated_interchange_is_not_split_into_broken_pieces() {
    let full = x12("261130", "1200", "004010", &["ST*214*0001", "B10*1*2*SWFT", "SE*3*0001"]);
    let cut = &full[..full.find("SE*3*0001~").unwrap() + "SE*3*0001".len()];
    let p = parse(cut.as_bytes());
    let err = split(cut.as_bytes(), &p.interchanges[0], &[0], "5").unwrap_err();
    let SplitError::Truncated { segment, offset } = &err;
    assert_eq!(segment, "SE*3*0001");
    assert_eq!(*offset, cut.len() - "SE*3*0001".len());
    assert!(err.to_string().contains("SE*3*0001"), "{err}");
    // The whole interchange splits as before.
    let p = parse(full.as_bytes());
    let piece = split(full.as_bytes(), &p.interchanges[0], &[0], "5").unwrap();
    assert!(!parse(&piece).has_errors());
}

#[test]
fn ak9_codes_come_from_the_group_code_list() {
    // A segment between GS and ST belongs to no transaction: the group is rejected, with no
    // code borrowed from the TA1 notes (024).
    let text = x12("261130", "1200", "004010", &["N1*SH*STRAY", "ST*214*0001", "SE*2*0001"]);
    let p = parse(text.as_bytes());
    assert_eq!(codes(&p), ["AK9"]);
    let a = ack(&text);
    let ak9 = a.lines().find(|l| l.starts_with("AK9")).unwrap();
    assert_eq!(ak9, "AK9*R*1*1*1~");
    // Count and reference errors of the group keep their codes 5 and 4.
    let text = x12("261130", "1200", "004010", &TX_214).replace("GE*1*77", "GE*2*78");
    let a = ack(&text);
    assert!(a.contains("AK9*E*2*1*1*5*4~"), "{a}");
    for line in a.lines().filter(|l| l.starts_with("AK9")) {
        for code in line.trim_end_matches('~').split('*').skip(5) {
            let n: u8 = code.parse().unwrap();
            assert!(matches!(n, 1..=6 | 10..=19 | 23..=26), "AK9 code {n}");
        }
    }
}

#[test]
fn a_wrong_se01_is_ak5_code_4_alone() {
    let a = ack(&x12("261130", "1200", "004010", &["ST*214*0001", "B10*1*2*SWFT", "SE*9*0001"]));
    assert!(a.contains("AK5*R*4~"), "{a}");
    assert!(!a.contains("AK3") && !a.contains("AK4"), "{a}");
}

#[test]
fn edifact_level_b_from_the_standard() {
    // ISO 9735 level B: IS3 (0x1D) separates elements, IS1 (0x1F) components, IS4 (0x1C) ends
    // a segment; no release character. Syntax 4 adds IS2 (0x19) for repetitions.
    let text = b"UNB\x1dUNOB\x1f4\x1dSENDER\x1f14\x1dRECEIVER\x1f14\x1d20261130\x1f1200\x1dB1\x1c\
                 UNH\x1d1\x1dORDERS\x1fD\x1f01B\x1fUN\x1c\
                 BGM\x1d220\x1dPO+1:A'B\x1d9\x1c\
                 UNT\x1d3\x1d1\x1c\
                 UNZ\x1d1\x1dB1\x1c";
    let p = parse(text);
    assert!(!p.has_errors(), "{p:?}");
    let ic = &p.interchanges[0];
    assert_eq!(ic.version, "UNOB:4");
    assert_eq!(ic.delimiters.element, 0x1D);
    assert_eq!(ic.delimiters.component, 0x1F);
    assert_eq!(ic.delimiters.terminator(), b"\x1c");
    assert_eq!(ic.delimiters.repetition, Some(0x19), "syntax 4 level B repeats with IS2");
    assert_eq!(ic.sender.to_string(), "14:SENDER");
    let tx = ic.transactions().next().unwrap();
    assert_eq!((tx.kind.as_str(), tx.segments), ("ORDERS", 3));
    // Level A characters are data in level B.
    let bgm = tollgate_edi::SegmentScanner::new(&text[..], ic.delimiters).nth(2).unwrap();
    assert_eq!(bgm.text(&ic.delimiters, 2), "PO+1:A'B");
}

#[test]
fn edifact_unoy_syntax_4_with_utf8_names() {
    // UNOY (ISO 10646-1, syntax 4) with the level A service characters and `*` repetitions.
    let text = "UNB+UNOY:4+MÜLLER LOGISTIK:ZZZ+ÅLESUND HAVN:ZZZ+20261130:1200+77'\
                UNH+1+IFTSTA:D:01B:UN'STS+1+12*19'NAD+CA+++Société Générale Fret'UNT+4+1'UNZ+1+77'";
    let p = parse(text.as_bytes());
    assert!(!p.has_errors(), "{p:?}");
    let ic = &p.interchanges[0];
    assert_eq!(ic.version, "UNOY:4");
    assert_eq!(ic.sender.id, "MÜLLER LOGISTIK");
    assert_eq!(ic.receiver.id, "ÅLESUND HAVN");
    assert_eq!(ic.delimiters.repetition, Some(b'*'));
    let a = ack(text);
    assert!(parse(a.as_bytes()).interchanges[0].receiver.id == "MÜLLER LOGISTIK", "{a}");
}

#[test]
fn isa_elements_longer_than_their_field_or_of_the_wrong_class_are_reported() {
    let base = x12("261130", "1200", "004010", &TX_214);
    // ISA06 is AN 15/15: 22 significant characters do not fit (TA1 note 006), and the TA1
    // rejects the interchange with that note.
    let long = base.replace("SWIFTLINE      ", "SWIFTLINE-LOGISTICS-EU");
    let p = parse(long.as_bytes());
    assert_eq!(codes(&p), ["TA1-006"]);
    let message = &p.interchanges[0].errors[0].message;
    assert!(message.contains("`SWIFTLINE-LOGISTICS-EU`") && message.contains("15"), "{message}");
    assert!(ack(&long).contains("*R*006~"));
    // Each element by its own note: ISA01 (010), ISA02 (011), ISA03 (012), ISA04 (013),
    // ISA05 (005), ISA07 (007), ISA08 (008), ISA11 (016).
    let isa = |i: usize, value: &str| {
        let (head, rest) = base.split_once('~').unwrap();
        let mut elements: Vec<&str> = head.split('*').collect();
        elements[i] = value;
        format!("{}~{rest}", elements.join("*"))
    };
    for (i, value, note) in [
        (1, "0", "TA1-010"),
        (2, "PASSWORD-TOO-LONG", "TA1-011"),
        (3, "0\t", "TA1-012"),
        (4, "SECRET\u{7}    ", "TA1-013"),
        (5, "ZZZ", "TA1-005"),
        (5, "zz", "TA1-005"),
        (7, "1", "TA1-007"),
        (8, "ACME\u{1}", "TA1-008"),
        (11, "UU", "TA1-016"),
    ] {
        let p = parse(isa(i, value).as_bytes());
        assert_eq!(codes(&p), [note], "ISA{i:02} {value:?}");
    }
    // Padding is layout: an element shorter or longer than its width only by spaces is read
    // without them and reported for nothing.
    for (i, value) in [(2, ""), (6, "SWIFTLINE"), (6, "SWIFTLINE            "), (8, "ACMECORP")] {
        let p = parse(isa(i, value).as_bytes());
        assert_eq!(codes(&p), Vec::<String>::new(), "ISA{i:02} {value:?}");
    }
}

#[test]
fn an_edifact_interchange_mixing_groups_and_ungrouped_messages_is_reported() {
    let unh = |n: u32| format!("UNH+{n}+ORDERS:D:96A:UN'BGM+220+{n}+9'UNT+3+{n}'");
    let group =
        |n: u32| format!("UNG+ORDERS+S:ZZZ+R:ZZZ+261130:1200+G{n}+UN+D:96A'{}UNE+1+G{n}'", unh(n));
    let head = "UNB+UNOA:3+S:ZZZ+R:ZZZ+261130:1200+9'";
    // A message after a group, and a group after a message: ISO 9735 allows one or the other.
    for body in [format!("{}{}", group(1), unh(2)), format!("{}{}", unh(1), group(2))] {
        let text = format!("{head}{body}UNZ+1+9'");
        let p = parse(text.as_bytes());
        assert_eq!(codes(&p), ["UCI-30"], "{text}");
        let message = &p.interchanges[0].errors[0].message;
        assert!(message.contains("UNG") && message.contains("UNH"), "{message}");
        assert!(ack(&text).contains("+4+30'"), "{}", ack(&text));
    }
    // Groups alone, or messages alone, are clean.
    for body in [format!("{}{}", group(1), group(2)), format!("{}{}", unh(1), unh(2))] {
        let text = format!("{head}{body}UNZ+2+9'");
        assert!(!parse(text.as_bytes()).has_errors(), "{text}");
    }
}
