//! Hand-written cases for each delimiter and layout variant, and for the usual mistakes:
//! `ISAAC` inside data, an unpadded ISA, a premature end of file, empty groups, wrong trailers.

use tollgate_edi::{ErrorKind, Level, ParsedFile, Standard, parse};

/// A padded ISA with the given element separator, repetition char, version, control number,
/// component separator and terminator.
fn isa(e: char, rep: char, version: &str, cn: &str, comp: char, term: &str) -> String {
    format!(
        "ISA{e}00{e}          {e}00{e}          {e}ZZ{e}SENDER         {e}ZZ{e}RECEIVER       \
         {e}240102{e}0930{e}{rep}{e}{version}{e}{cn}{e}0{e}P{e}{comp}{term}"
    )
}

/// A clean 214 interchange with `n` transactions of 2 AT7 each, using `*` `>` `~`.
fn x12_214(cn: &str, n: usize, sep: &str) -> String {
    let mut s = isa('*', 'U', "00401", cn, '>', "~");
    s.push_str(sep);
    s.push_str(&format!("GS*QM*SENDER*RECEIVER*20240102*0930*7*X*004010~{sep}"));
    for i in 1..=n {
        s.push_str(&format!(
            "ST*214*{i:04}~{sep}B10*PRO{i}*SHIP{i}*SCAC~{sep}LX*1~{sep}AT7*X3*NS***20240102*0930~{sep}\
             AT7*D1*NS***20240102*1130~{sep}SE*6*{i:04}~{sep}"
        ));
    }
    s.push_str(&format!("GE*{n}*7~{sep}IEA*1*{cn}~{sep}"));
    s
}

fn only(p: &ParsedFile) -> &tollgate_edi::Interchange {
    assert_eq!(p.interchanges.len(), 1, "{p:?}");
    &p.interchanges[0]
}

fn codes(p: &ParsedFile) -> Vec<String> {
    p.interchanges.iter().flat_map(|i| i.errors.iter().map(|e| e.code.clone())).collect()
}

#[test]
fn clean_x12_with_and_without_line_breaks() {
    for sep in ["", "\n", "\r\n"] {
        let p = parse(x12_214("000000001", 3, sep).as_bytes());
        let ic = only(&p);
        assert!(p.errors.is_empty() && ic.errors.is_empty(), "{sep:?}: {:?}", ic.errors);
        assert_eq!(ic.counts.transactions, 3);
        assert_eq!(ic.counts.segments, 2 + 3 * 6 + 2);
        assert_eq!(ic.transactions().map(|t| t.segments).collect::<Vec<_>>(), [6, 6, 6]);
        assert_eq!(ic.sender.to_string(), "ZZ:SENDER");
        assert_eq!(ic.date, "240102");
    }
}

#[test]
fn bom_and_whitespace_before_the_interchange() {
    let file = format!("\u{feff}\r\n  \t\n{}", x12_214("000000001", 1, "\n"));
    let p = parse(file.as_bytes());
    assert!(p.errors.is_empty());
    assert_eq!(only(&p).span.start, 3 + 6);
}

#[test]
fn x12_and_edifact_interchanges_in_one_file() {
    let edifact = "UNA:+.? '\nUNB+UNOC:3+S:14+R:14+240102:0930+REF1'\nUNH+1+IFTSTA:D:01B:UN'\
                   STS+1+X?'Y'UNT+3+1'UNZ+1+REF1'\n";
    let file = format!("{}{edifact}{}", x12_214("000000001", 1, "\n"), x12_214("000000002", 2, ""));
    let p = parse(file.as_bytes());
    assert!(!p.has_errors(), "{p:?}");
    let kinds: Vec<_> = p.interchanges.iter().map(|i| i.standard).collect();
    assert_eq!(kinds, [Standard::X12, Standard::Edifact, Standard::X12]);
    assert_eq!(p.interchanges[1].control_number.as_str(), "REF1");
    assert_eq!(p.interchanges[2].counts.transactions, 2);
}

#[test]
fn unpadded_isa() {
    let file = "ISA*00**00**ZZ*ACME*ZZ*BIGCO*240102*0930*U*00401*1*0*P*>~\
                GS*QM*A*B*20240102*0930*1*X*004010~ST*214*1~SE*2*1~GE*1*1~IEA*1*1~";
    let p = parse(file.as_bytes());
    let ic = only(&p);
    assert_eq!(ic.sender.to_string(), "ZZ:ACME");
    assert_eq!(ic.receiver.to_string(), "ZZ:BIGCO");
    assert_eq!(ic.counts.transactions, 1);
    // ISA13 `1` is not 9 digits: reported as TA1 018, the scan goes on.
    assert_eq!(codes(&p), ["TA1-018"]);
}

#[test]
fn isaac_inside_data_and_between_interchanges() {
    let mut file = x12_214("000000001", 1, "\n")
        .replace("B10*PRO1", "N1*ST*ISAAC NEWTON~\nISAAC*1~\nB10*PRO1");
    file = file.replace("SE*6*0001", "SE*8*0001");
    file.push_str("ISAAC NEWTON WAS HERE\n");
    file.push_str(&x12_214("000000002", 1, "\n"));
    let p = parse(file.as_bytes());
    assert_eq!(p.interchanges.len(), 2);
    assert!(p.interchanges.iter().all(|i| i.errors.is_empty()), "{p:?}");
    assert_eq!(p.interchanges[0].transactions().next().unwrap().segments, 8);
    assert_eq!(p.errors.len(), 1);
    assert_eq!(p.errors[0].code, "FILE");
    assert!(p.errors[0].message.contains("between interchanges"));
}

#[test]
fn premature_end_of_file() {
    let full = x12_214("000000001", 2, "\n");
    let cut = &full[..full.find("SE*6*0002").unwrap()];
    let p = parse(cut.as_bytes());
    let ic = only(&p);
    assert_eq!(codes(&p), ["AK5-2", "AK9-3", "TA1-023"]);
    assert!(!ic.complete);
    assert_eq!(ic.counts.transactions, 2);
    assert!(!ic.transactions().nth(1).unwrap().complete);
    assert!(ic.errors[2].message.contains("premature end of file"));
    // Cut inside the ISA itself: no interchange, a file-level error.
    let p = parse(&full.as_bytes()[..50]);
    assert!(p.interchanges.is_empty());
    assert!(p.errors[0].message.contains("ISA"));
}

#[test]
fn empty_groups_are_valid_and_counted() {
    let file = format!(
        "{}GS*QM*A*B*20240102*0930*1*X*004010~GE*0*1~GS*QM*A*B*20240102*0930*2*X*004010~GE*1*2~IEA*2*000000009~",
        isa('*', 'U', "00401", "000000009", '>', "~")
    );
    let p = parse(file.as_bytes());
    let ic = only(&p);
    assert_eq!(ic.groups.len(), 2);
    assert!(ic.groups.iter().all(|g| g.transactions.is_empty()));
    // The second group declares one transaction it does not have.
    assert_eq!(codes(&p), ["AK9-5"]);
    assert_eq!(ic.errors[0].group, Some(1));
}

#[test]
fn multi_byte_terminator_with_crlf() {
    let file = x12_214("000000001", 2, "\r\n").replace('~', "…");
    let p = parse(file.as_bytes());
    let ic = only(&p);
    assert_eq!(ic.delimiters.terminator(), "…".as_bytes());
    assert!(ic.errors.is_empty());
    assert_eq!(ic.counts.transactions, 2);
}

#[test]
fn control_character_delimiters_and_line_feed_terminator() {
    // Element 0x1E, component 0x1D, terminator LF (like stupidedi gh-189), with an empty group.
    let file =
        x12_214("000000001", 1, "").replace('*', "\x1e").replace('>', "\x1d").replace('~', "\n");
    let p = parse(file.as_bytes());
    let ic = only(&p);
    assert_eq!(ic.delimiters.element, 0x1E);
    assert_eq!(ic.delimiters.component, 0x1D);
    assert_eq!(ic.delimiters.terminator(), b"\n");
    assert!(ic.errors.is_empty(), "{:?}", ic.errors);
    assert_eq!(ic.counts.transactions, 1);
}

#[test]
fn carriage_return_terminator_followed_by_line_feed() {
    let file = x12_214("000000001", 2, "\n").replace('~', "\r");
    let p = parse(file.as_bytes());
    let ic = only(&p);
    assert_eq!(ic.delimiters.terminator(), b"\r");
    assert!(ic.errors.is_empty());
    assert_eq!(ic.counts.transactions, 2);
}

#[test]
fn repetition_separator_rules() {
    let rep = |r: char, v: &str| {
        let file = format!("{}IEA*0*000000001~", isa('*', r, v, "000000001", ':', "~"));
        only(&parse(file.as_bytes())).delimiters.repetition
    };
    assert_eq!(rep('^', "00401"), None, "before 00402 ISA11 is the standards id");
    assert_eq!(rep('^', "00402"), Some(b'^'));
    assert_eq!(rep('^', "00501"), Some(b'^'));
    assert_eq!(rep('U', "00501"), None, "alphanumeric ISA11 is no repetition separator");
    assert_eq!(rep(':', "00501"), None, "ISA11 equal to ISA16 is no repetition separator");
}

#[test]
fn x12_wrapped_at_80_columns_reads_like_the_original() {
    let original = x12_214("000000001", 3, "");
    // 80 columns, and 35 / 21 columns, which put a line break between ISA16 and the terminator.
    for width in [80, 35, 21] {
        let wrapped: String = original
            .as_bytes()
            .chunks(width)
            .map(|c| format!("{}\n", std::str::from_utf8(c).unwrap()))
            .collect();
        let (a, b) = (parse(original.as_bytes()), parse(wrapped.as_bytes()));
        assert!(!b.has_errors(), "{b:?}");
        let key = |p: &ParsedFile| {
            let ic = only(p);
            (
                ic.sender.clone(),
                ic.control_number.clone(),
                ic.time.clone(),
                ic.transactions()
                    .map(|t| (t.kind.clone(), t.control_number.clone(), t.segments))
                    .collect::<Vec<_>>(),
            )
        };
        assert_eq!(key(&a), key(&b), "width {width}");
        assert_eq!(only(&b).delimiters.terminator(), b"~");
    }
}

#[test]
fn edifact_level_a_without_una_and_release_parity() {
    let file = "UNB+UNOA:3+SENDER:ZZZ+RECEIVER:ZZZ+240102:0930+42'\
                UNH+M1+IFTSTA:D:01B:UN'FTX+AAA+++PRICE 10?+ A ?'B??'STS+1'UNT+4+M1'UNZ+1+42'";
    let p = parse(file.as_bytes());
    let ic = only(&p);
    assert_eq!(ic.delimiters, tollgate_edi::Delimiters::EDIFACT_LEVEL_A);
    assert!(ic.errors.is_empty(), "{:?}", ic.errors);
    let tx = ic.transactions().next().unwrap();
    assert_eq!(tx.segments, 4);
    assert_eq!(tx.message_version.as_deref(), Some("D:01B:UN"));
    // One implicit group with null ids.
    assert_eq!(ic.groups.len(), 1);
    assert_eq!(ic.groups[0].functional_id, None);
    assert_eq!(ic.groups[0].control_number, None);
}

#[test]
fn edifact_level_b_sniffed_from_unb() {
    let file = "UNB\x1dUNOB\x1f3\x1dS\x1d R\x1d240102\x1f0930\x1d7\x1cUNH\x1d1\x1dORDERS\x1fD\x1f96A\x1fUN\x1c\
                BGM\x1d220\x1cUNT\x1d3\x1d1\x1cUNZ\x1d1\x1d7\x1c";
    let p = parse(file.as_bytes());
    let ic = only(&p);
    assert_eq!(ic.delimiters, tollgate_edi::Delimiters::EDIFACT_LEVEL_B);
    assert_eq!(ic.receiver.id, "R");
    assert!(ic.errors.is_empty(), "{:?}", ic.errors);
    assert_eq!(ic.transactions().next().unwrap().kind, "ORDERS");
}

#[test]
fn edifact_non_standard_separator_without_una_is_refused() {
    let p = parse(b"UNB*UNOA:3*S*R*240102:0930*1'UNZ*0*1'");
    assert!(p.interchanges.is_empty());
    assert!(p.errors[0].message.contains("without a UNA"));
}

#[test]
fn edifact_trailer_errors_use_contrl_codes() {
    let file = "UNB+UNOA:3+S+R+240102:0930+1'UNG+INVOIC+S+R+240102:0930+G1+UN+D:96A'\
                UNH+1+INVOIC:D:96A:UN'BGM+380'UNT+9+2'UNE+2+G2'UNZ+3+9'";
    let p = parse(file.as_bytes());
    assert_eq!(codes(&p), ["UCM-29", "UCM-28", "UCF-29", "UCF-28", "UCI-29", "UCI-28"]);
    let ic = only(&p);
    assert_eq!(ic.errors[0].level, Level::Transaction);
    assert_eq!(ic.errors[0].kind, ErrorKind::CountMismatch { declared: "9".into(), actual: 3 });
}

#[test]
fn missing_trailers_and_stray_segments_do_not_stop_the_scan() {
    let file = format!(
        "{}GS*QM*A*B*20240102*0930*1*X*004010~ST*214*0001~B10*1~ST*214*0002~SE*2*0002~N1*XX~\
         GE*2*1~ST*214*0003~SE*2*0003~IEA*1*000000001~",
        isa('*', 'U', "00401", "000000001", '>', "~")
    );
    let p = parse(file.as_bytes());
    let ic = only(&p);
    // IEA01 counts explicit groups only: the stray ST*0003 sits in an implicit one.
    assert_eq!(codes(&p), ["AK5-2", "AK9", "AK5-18"]);
    assert_eq!(ic.counts.transactions, 3);
    assert_eq!(ic.errors[0].transaction, Some(0));
    assert!(ic.errors[1].message.contains("N1"));
}

#[test]
fn a_new_isa_closes_an_interchange_without_iea() {
    let first = x12_214("000000001", 1, "\n");
    let first = &first[..first.find("IEA").unwrap()];
    let file = format!("{first}{}", x12_214("000000002", 1, "\n"));
    let p = parse(file.as_bytes());
    assert_eq!(p.interchanges.len(), 2);
    assert_eq!(codes(&p), ["TA1-023"]);
    assert!(p.interchanges[0].errors[0].message.contains("new interchange"));
    assert!(p.interchanges[1].errors.is_empty());
}

#[test]
fn empty_and_garbage_files_have_no_interchange() {
    let p = parse(b"");
    assert!(p.interchanges.is_empty());
    assert!(p.errors[0].message.contains("empty"));
    let p = parse(b"hello world\n");
    assert!(p.errors[0].message.contains("no interchange"));
    assert!(p.errors[0].message.contains("hello world"));
}
