//! Acknowledgements, splitting and streaming, on hand-written interchanges.

use tollgate_edi::split;
use tollgate_edi::{AckFormat, acknowledge, gaps};
use tollgate_edi::{Reader, ReaderOptions, Standard, parse};

fn isa(version: &str, rep: char, cn: &str, ack: char) -> String {
    format!(
        "ISA*00*          *00*          *ZZ*CARRIER        *01*123456789      *240102*0930*{rep}*{version}*{cn}*{ack}*P*>~\n"
    )
}

/// An interchange with one group of `n` 214s; `bad_se` gives transaction 2 a wrong SE01.
fn x12(version: &str, gs_version: &str, n: usize, bad_se: bool) -> String {
    let mut s = isa(version, '^', "000000321", '0');
    s.push_str(&format!("GS*QM*CARRIERAPP*ERPAPP*20240102*0930*55*X*{gs_version}~\n"));
    for i in 1..=n {
        let count = if bad_se && i == 2 { 9 } else { 4 };
        s.push_str(&format!(
            "ST*214*{i:04}~\nB10*PRO{i}*S{i}*SCAC~\nAT7*X3*NS***20240102*0930~\nSE*{count}*{i:04}~\n"
        ));
    }
    s.push_str(&format!("GE*{n}*55~\nIEA*1*000000321~\n"));
    s
}

fn ack_text(file: &str, format: AckFormat, cn: u64) -> String {
    let p = parse(file.as_bytes());
    let ack = acknowledge(file.as_bytes(), &p.interchanges[0], format, cn).expect("an ack");
    String::from_utf8(ack).unwrap()
}

fn segments(text: &str) -> Vec<&str> {
    text.split('~').map(str::trim).filter(|s| !s.is_empty()).collect()
}

#[test]
fn ack_997_for_004010_swaps_parties_and_reports_the_bad_transaction() {
    let file = x12("00401", "004010", 3, true);
    let text = ack_text(&file, AckFormat::Auto, 9001);
    let segs = segments(&text);
    assert!(
        segs[0]
            .starts_with("ISA*00*          *00*          *01*123456789      *ZZ*CARRIER        *")
    );
    assert!(segs[0].contains("*000009001*0*P*>"));
    assert!(segs[1].starts_with("GS*FA*ERPAPP*CARRIERAPP*"));
    assert!(segs[1].ends_with("*9001*X*004010"));
    assert_eq!(segs[2], "ST*997*0001");
    assert_eq!(segs[3], "AK1*QM*55");
    assert_eq!(
        &segs[4..10],
        ["AK2*214*0001", "AK5*A", "AK2*214*0002", "AK5*R*4", "AK2*214*0003", "AK5*A"]
    );
    // A wrong SE01 is AK5 code 4 alone: no AK3/AK4 with code 7 beside it.
    assert!(!segs.iter().any(|s| s.starts_with("AK3") || s.starts_with("AK4")), "{segs:?}");
    assert_eq!(segs[10], "AK9*P*3*3*2");
    assert_eq!(segs[11], format!("SE*{}*0001", 11 - 2 + 1));
    assert_eq!(segs[12], "GE*1*9001");
    assert_eq!(segs[13], "IEA*1*000009001");
    // The acknowledgement is a valid interchange and is itself never acknowledged.
    let back = parse(text.as_bytes());
    assert!(!back.has_errors(), "{back:?}");
    assert!(back.interchanges[0].is_acknowledgement());
    assert_eq!(acknowledge(text.as_bytes(), &back.interchanges[0], AckFormat::Auto, 1), None);
}

#[test]
fn ack_999_for_005010_uses_ik3_ik4_ik5() {
    let file = x12("00501", "005010", 2, true);
    let segs_owned = ack_text(&file, AckFormat::Auto, 5);
    let segs = segments(&segs_owned);
    assert_eq!(segs[2], "ST*999*0001*005010X231");
    assert_eq!(segs[3], "AK1*QM*55*005010");
    assert!(!segs.iter().any(|s| s.starts_with("IK3") || s.starts_with("IK4")), "{segs:?}");
    assert!(segs.contains(&"IK5*R*4"));
    assert!(segs.contains(&"IK5*A"));
    assert!(segs.contains(&"AK9*P*2*2*1"));
    // ISA11 carries the repetition separator of the original from 00501.
    assert!(segs[0].contains("*^*00501*"));
    assert!(!parse(segs_owned.as_bytes()).has_errors());
}

#[test]
fn ta1_reports_interchange_errors_and_requests() {
    // IEA02 differs from ISA13: TA1 code E with note 001.
    let file = x12("00401", "004010", 1, false).replace("IEA*1*000000321", "IEA*1*000000322");
    let text = ack_text(&file, AckFormat::Auto, 1);
    assert!(segments(&text).contains(&"TA1*000000321*240102*0930*E*001"));
    // A missing IEA is a rejection (023), and TA1 alone can be asked for.
    let cut = x12("00401", "004010", 1, false).replace("IEA*1*000000321~\n", "");
    let text = ack_text(&cut, AckFormat::Ta1, 1);
    let segs = segments(&text);
    assert_eq!(segs[1], "TA1*000000321*240102*0930*R*023");
    assert_eq!(segs[2], "IEA*0*000000001");
    // A clean interchange with ISA14 = 1 gets a positive TA1 and its 997.
    let asked = x12("00401", "004010", 1, false).replace("*000000321*0*P", "*000000321*1*P");
    let segs_owned = ack_text(&asked, AckFormat::Auto, 1);
    let segs = segments(&segs_owned);
    assert_eq!(segs[1], "TA1*000000321*240102*0930*A*000");
    assert!(segs.contains(&"AK9*A*1*1*1"));
}

#[test]
fn contrl_for_edifact() {
    let file = "UNA:+.? '\nUNB+UNOC:3+SENDER:14+RECEIVER:14+240102:0930+IC7++++++1'\n\
                UNH+M1+IFTSTA:D:01B:UN'\nSTS+1'\nUNT+3+M1'\nUNH+M2+IFTSTA:D:01B:UN'\nSTS+1'\nUNT+7+M2'\n\
                UNZ+2+IC7'\n";
    let text = ack_text(file, AckFormat::Auto, 77);
    let segs: Vec<&str> =
        text.split('\'').map(|s| s.trim_start_matches('\n')).filter(|s| !s.is_empty()).collect();
    assert_eq!(segs[0], "UNA:+.? ");
    assert!(segs[1].starts_with("UNB+UNOC:3+RECEIVER:14+SENDER:14+"));
    assert!(segs[1].ends_with("+77++++++1"), "{}", segs[1]);
    assert_eq!(segs[2], "UNH+1+CONTRL:D:3:UN");
    assert_eq!(segs[3], "UCI+IC7+SENDER:14+RECEIVER:14+7");
    assert_eq!(segs[4], "UCM+M1+IFTSTA:D:01B:UN+7");
    assert_eq!(segs[5], "UCM+M2+IFTSTA:D:01B:UN+4+29");
    assert_eq!(segs[6], "UNT+5+1");
    assert_eq!(segs[7], "UNZ+1+77");
    let back = parse(text.as_bytes());
    assert!(!back.has_errors());
    assert!(back.interchanges[0].is_acknowledgement());
    // Formats of the other standard do not apply.
    let p = parse(file.as_bytes());
    assert_eq!(acknowledge(file.as_bytes(), &p.interchanges[0], AckFormat::X997, 1), None);
}

#[test]
fn split_keeps_the_chosen_transactions_with_new_envelopes() {
    let file = x12("00401", "004010", 3, false);
    let p = parse(file.as_bytes());
    let ic = &p.interchanges[0];
    let piece = split(file.as_bytes(), ic, &[0, 2, 99], "777").unwrap();
    let text = String::from_utf8(piece.clone()).unwrap();
    assert!(text.contains("*000000777*0*P*>~"));
    assert!(text.contains("GE*2*55~"));
    assert!(text.contains("IEA*1*000000777~"));
    let back = parse(&piece);
    assert!(!back.has_errors(), "{back:?}");
    let b = &back.interchanges[0];
    let ids: Vec<_> = b.transactions().map(|t| t.control_number.to_string()).collect();
    assert_eq!(ids, ["0001", "0003"]);
    assert_eq!(b.sender, ic.sender);
    assert_eq!(b.control_number.as_str(), "000000777");
}

#[test]
fn split_edifact_with_and_without_groups() {
    let plain = "UNB+UNOA:3+S+R+240102:0930+1'UNH+1+INVOIC:D:96A:UN'BGM+380'UNT+3+1'\
                 UNH+2+INVOIC:D:96A:UN'BGM+380'UNT+3+2'UNZ+2+1'";
    let p = parse(plain.as_bytes());
    let piece = split(plain.as_bytes(), &p.interchanges[0], &[1], "ABC").unwrap();
    let back = parse(&piece);
    assert!(!back.has_errors(), "{back:?}");
    assert_eq!(back.interchanges[0].control_number.as_str(), "ABC");
    assert_eq!(back.interchanges[0].transactions().next().unwrap().control_number.as_str(), "2");
    let grouped = "UNB+UNOA:3+S+R+240102:0930+1'UNG+INVOIC+S+R+240102:0930+G+UN+D:96A'\
                   UNH+1+INVOIC:D:96A:UN'UNT+2+1'UNH+2+INVOIC:D:96A:UN'UNT+2+2'UNE+2+G'UNZ+1+1'";
    let p = parse(grouped.as_bytes());
    let piece = split(grouped.as_bytes(), &p.interchanges[0], &[0], "9").unwrap();
    let text = String::from_utf8(piece.clone()).unwrap();
    assert!(text.contains("UNE+1+G'"));
    assert!(text.contains("UNZ+1+9'"));
    assert!(!parse(&piece).has_errors());
}

#[test]
fn reader_counts_an_interchange_larger_than_its_buffer() {
    let n = 3000;
    let file = x12("00401", "004010", n, false);
    assert!(file.len() > 100_000);
    let opts = ReaderOptions {
        buffer_size: 1024,
        rule: "segment:AT7".parse().unwrap(),
        ..Default::default()
    };
    let mut reader = Reader::with_options(file.as_bytes(), opts);
    let ic = reader.next().unwrap().unwrap();
    assert!(reader.next().is_none());
    assert_eq!(reader.buffer_capacity(), 1024, "the buffer never grew");
    assert_eq!(ic.standard, Standard::X12);
    assert_eq!(ic.counts.transactions, n as u64);
    assert_eq!(ic.counts.records, n as u64);
    assert_eq!(ic.counts.segments, 4 * n as u64 + 4);
    assert!(ic.errors.is_empty());
    assert_eq!(ic.transactions().count(), 0, "transactions are not kept by default");
    assert_eq!(ic.span, 0..file.len() - 1);
}

#[test]
fn reader_reports_io_errors() {
    struct Failing;
    impl std::io::Read for Failing {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk on fire"))
        }
    }
    let mut reader = Reader::new(Failing);
    let err = reader.next().unwrap().unwrap_err();
    assert!(err.to_string().contains("disk on fire"));
    assert!(reader.next().is_none());
}

#[test]
fn reader_gives_up_on_a_segment_longer_than_its_limit_and_goes_on() {
    let first = x12("00401", "004010", 1, false);
    let broken = first.replace("B10*PRO1*S1*SCAC~", &format!("B10*{}~", "X".repeat(50_000)));
    let file =
        format!("{broken}{}", x12("00401", "004010", 2, false).replace("000000321", "000000999"));
    let opts = ReaderOptions {
        buffer_size: 1024,
        max_segment: 8192,
        max_errors: usize::MAX,
        ..Default::default()
    };
    let mut reader = Reader::with_options(file.as_bytes(), opts);
    let items: Vec<_> = reader.by_ref().map(Result::unwrap).collect();
    assert!(reader.buffer_capacity() <= 8192);
    assert_eq!(items.len(), 2, "{items:?}");
    let codes: Vec<_> = items[0].errors.iter().map(|e| e.code.as_str()).collect();
    assert_eq!(codes, ["AK5-2", "AK9-3", "TA1-023"]);
    assert!(items[0].errors[2].message.contains("no segment terminator within 8192 bytes"));
    assert_eq!(items[1].control_number.as_str(), "000000999");
    assert!(items[1].errors.is_empty());
    assert_eq!(items[1].counts.transactions, 2);
    // Without the limit the whole file parses in memory: the long segment is just data.
    assert!(!parse(file.as_bytes()).has_errors());
}

#[test]
fn ack_keeps_a_component_separator_above_ascii_as_one_byte() {
    // ISA16 = 0x9D, a byte some translators use; the terminator is a line break.
    let mut file = isa("00401", '^', "000000321", '0').into_bytes();
    let at = file.iter().position(|&b| b == b'>').unwrap();
    file[at] = 0x9D;
    file.truncate(at + 1);
    file.extend_from_slice(b"\nGS*QM*A*B*20240102*0930*55*X*004010\nST*214*0001\n");
    file.extend_from_slice(b"B10*PRO1*S1*SCAC\nSE*3*0001\nGE*1*55\nIEA*1*000000321\n");
    let p = parse(&file);
    assert!(!p.has_errors(), "{:?}", p.interchanges[0].errors);
    let ack = acknowledge(&file, &p.interchanges[0], AckFormat::Auto, 7).expect("an ack");
    let isa_end = ack.iter().position(|&b| b == b'\n').unwrap();
    assert_eq!(&ack[isa_end - 2..=isa_end], b"*\x9D\n");
    assert_eq!(isa_end, 105, "the ISA is 106 bytes with its terminator");
    let back = parse(&ack);
    assert!(!back.has_errors(), "{:?}", back.interchanges[0].errors);
}

/// A party id that is not UTF-8 (a Latin-1 `é`) reads as U+FFFD, whose bytes EF BF BD went
/// into the acknowledgement's ISA as they were: with 0xBD as the element separator, the
/// ISA then had 17 elements and the acknowledgement did not parse. Found by fuzzing
/// (`fuzz/seeds/parse/x12-latin1-sender-bd-separator.edi`,
/// `fuzz/seeds/parse/isa-ef-separator-non-utf8-qualifier.edi`).
#[test]
fn ack_escapes_party_bytes_that_read_as_delimiters() {
    let latin1 =
        b"ISA\xbd00\xbd          \xbd00\xbd          \xbdZZ\xbdCAF\xe9           \xbd01\xbd\
123456789      \xbd240102\xbd0930\xbdU\xbd00401\xbd000000321\xbd0\xbdP\xbd>~\n\
GS\xbdQM\xbdA\xbdB\xbd20240102\xbd0930\xbd55\xbdX\xbd004010~\nST\xbd214\xbd0001~\n\
B10\xbdPRO1\xbdS1\xbdSCAC~\nSE\xbd3\xbd0001~\nGE\xbd1\xbd55~\nIEA\xbd1\xbd000000321~\n";
    let fuzzed = b"ISA\xef\xef\xef\xef\xef\xef\xef\xff\xef\xef\xef\xef\xef\xef\xef\xef\xef*~";
    for (file, clean) in [(&latin1[..], true), (&fuzzed[..], false)] {
        let p = parse(file);
        assert_eq!(p.interchanges.len(), 1);
        assert_eq!(p.interchanges[0].errors.is_empty(), clean, "{:?}", p.interchanges[0].errors);
        for format in [AckFormat::Auto, AckFormat::Ta1, AckFormat::X997, AckFormat::X999] {
            let ack = acknowledge(file, &p.interchanges[0], format, 7).expect("an ack");
            let back = parse(&ack);
            assert_eq!(back.interchanges.len(), 1, "{format:?}: {}", ack.escape_ascii());
            if clean {
                assert!(!back.has_errors(), "{format:?}: {:?}", back.interchanges[0].errors);
            }
            let isa = &ack[..ack.iter().position(|&b| b == b'~').unwrap()];
            let separators = isa.iter().filter(|&&b| b == p.interchanges[0].delimiters.element);
            assert_eq!(separators.count(), 16, "{format:?}: {}", isa.escape_ascii());
        }
    }
}

/// The interchange of `ack_escapes_party_bytes_that_read_as_delimiters` (element separator
/// 0xBD, component separator `>`) with `isa06` as its ISA06, as received.
fn bd_separated(isa06: &[u8]) -> Vec<u8> {
    let mut file = b"ISA\xbd00\xbd          \xbd00\xbd          \xbdZZ\xbd".to_vec();
    file.extend_from_slice(isa06);
    file.extend_from_slice(
        b"\xbd01\xbd123456789      \xbd240102\xbd0930\xbdU\xbd00401\xbd000000321\xbd0\xbdP\xbd>~\n\
GS\xbdQM\xbdA\xbdB\xbd20240102\xbd0930\xbd55\xbdX\xbd004010~\nST\xbd214\xbd0001~\n\
B10\xbdPRO1\xbdS1\xbdSCAC~\nSE\xbd3\xbd0001~\nGE\xbd1\xbd55~\nIEA\xbd1\xbd000000321~\n",
    );
    file
}

/// A character of a party that cannot be written with the interchange's delimiters (X12 has no
/// release character) is written as one `?`, never as part of a character or as a space: the
/// U+FFFD a Latin-1 `é` reads as ends in 0xBD, the element separator, and writing that byte
/// alone as a space left EF BF, which reads as U+FFFD, then the space, one character more. An
/// ISA06 of 15 characters (16 bytes, the last one padding) then came back as an ISA08 of 16
/// (TA1 note 008); and an ISA06 of `>` (the component separator) alone came back blank.
/// Found by the fuzz seeds' mutation test (seed `x12-latin1-sender-bd-separator.edi`, `I`
/// inserted before the sender id and its 15th byte overwritten with `:`).
#[test]
fn ack_writes_a_party_character_it_cannot_carry_as_one_character() {
    for (isa06, written) in [
        (&b"ICAF\xe9         : "[..], "ICAF?         :"),
        (b">              ", "?"),
        (b"\xe9              ", "?"),
    ] {
        let file = bd_separated(isa06);
        let p = parse(&file);
        let ic = &p.interchanges[0];
        assert!(!p.has_errors(), "{}: {:?}", isa06.escape_ascii(), ic.errors);
        for format in [AckFormat::Auto, AckFormat::Ta1, AckFormat::X997, AckFormat::X999] {
            let ack = acknowledge(&file, ic, format, 7).expect("an ack");
            let back = parse(&ack);
            let shown = ack.escape_ascii();
            assert!(!back.has_errors(), "{format:?}: {:?}\n{shown}", back.interchanges[0].errors);
            assert_eq!(back.interchanges[0].receiver.id, written, "{format:?}: {shown}");
            let isa_end = ack.iter().position(|&b| b == b'~').unwrap();
            assert_eq!(isa_end, 105, "{format:?}: the ISA is 106 bytes: {shown}");
        }
    }
}

#[test]
fn contrl_fills_a_missing_syntax_identifier_and_names_what_it_cannot_fill() {
    let body = "UNH+1+ORDERS:D:96A:UN'BGM+220+1+9'UNT+3+1'";
    // No S001 at all: the CONTRL gets one at the level it is written in (level A: UNOA, with
    // syntax version 3, whose date is YYMMDD), and reads back clean.
    for (unb, filled) in [
        ("UNB++SENDER:ZZZ+RECEIVER:ZZZ+240102:0930+77'", "UNB+UNOA:3+RECEIVER:ZZZ+SENDER:ZZZ+"),
        ("UNB+UNOC+SENDER:ZZZ+RECEIVER:ZZZ+240102:0930+77'", "UNB+UNOC:3+RECEIVER:ZZZ+SENDER:ZZZ+"),
    ] {
        let file = format!("{unb}{body}UNZ+1+77'");
        let p = parse(file.as_bytes());
        assert_eq!(p.interchanges[0].errors[0].code, "UCI-13", "{:?}", p.interchanges[0].errors);
        let text = ack_text(&file, AckFormat::Contrl, 5);
        assert!(text.starts_with(filled), "{text}");
        let date = text.split('+').nth(4).unwrap().split(':').next().unwrap();
        assert_eq!(date.len(), 6, "syntax 3 dates are YYMMDD: {text}");
        let back = parse(text.as_bytes());
        assert!(!back.has_errors(), "{text}\n{:?}", back.interchanges[0].errors);
        // The UCI carries the input's error: S001 missing (13).
        assert!(text.contains("UCI+77+SENDER:ZZZ+RECEIVER:ZZZ+4+13'"), "{text}");
        assert_eq!(gaps(&p.interchanges[0], AckFormat::Contrl), Vec::<String>::new());
    }
    // Level B delimiters: UNOB.
    let file = "UNB\x1d\x1dS\x1dR\x1d240102\x1f0930\x1d77\x1cUNH\x1d1\x1dORDERS\x1fD\x1f96A\x1fUN\x1c\
                UNT\x1d2\x1d1\x1cUNZ\x1d1\x1d77\x1c";
    let text = ack_text(file, AckFormat::Contrl, 5);
    assert!(text.starts_with("UNB\x1dUNOB\x1f3\x1dR\x1dS\x1d"), "{}", text.escape_debug());
    assert!(!parse(text.as_bytes()).has_errors(), "{}", text.escape_debug());
    // No sender and no control reference: those cannot be made up, and are named.
    let file = format!("UNB+UNOA:3++RECEIVER:ZZZ+240102:0930'{body}UNZ+1'");
    let p = parse(file.as_bytes());
    let said = gaps(&p.interchanges[0], AckFormat::Contrl);
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[0].contains("S002") && said[0].contains("S003"), "{said:?}");
    assert!(said[1].contains("0020") && said[1].contains("UCI"), "{said:?}");
}

#[test]
fn an_x12_acknowledgement_names_an_id_too_long_for_its_isa() {
    let file =
        x12("00401", "004010", 1, false).replace("CARRIER        ", "CARRIER-WITH-A-LONG-ID");
    let p = parse(file.as_bytes());
    let said = gaps(&p.interchanges[0], AckFormat::Auto);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("ISA06 `CARRIER-WITH-A-LONG-ID`"), "{said:?}");
    assert!(said[0].contains("ISA08") && said[0].contains("`CARRIER-WITH-A-`"), "{said:?}");
    assert_eq!(
        gaps(&parse(x12("00401", "004010", 1, false).as_bytes()).interchanges[0], AckFormat::Auto),
        Vec::<String>::new()
    );
}
