//! Transaction fingerprints: a copy under fresh control numbers, other delimiters or another
//! line layout has its original's fingerprint; any change of content gives another one.

use tollgate_edi::{Fingerprint, fingerprint, parse};

/// The fingerprints of every transaction in `text`, in order.
fn fingerprints(text: &str) -> Vec<Fingerprint> {
    let parsed = parse(text.as_bytes());
    assert!(!parsed.interchanges.is_empty(), "no interchange in {text}");
    parsed
        .interchanges
        .iter()
        .flat_map(|ic| ic.transactions().map(|tx| fingerprint(text.as_bytes(), tx, ic)))
        .collect()
}

fn x12(isa13: u32, gs06: u32, body: &[(&str, &str)]) -> String {
    let mut s = format!(
        "ISA*00*          *00*          *ZZ*CARRIERA       *ZZ*ACME           *240101*1200*U*00401*{isa13:09}*0*P*>~\nGS*QM*CARRIERA*ACME*20240101*1200*{gs06}*X*004010~\n"
    );
    for (st02, segments) in body {
        let n = segments.matches('~').count() + 2;
        s.push_str(&format!("ST*214*{st02}~\n{segments}SE*{n}*{st02}~\n"));
    }
    s.push_str(&format!("GE*{}*{gs06}~\nIEA*1*{isa13:09}~\n", body.len()));
    s
}

const UPDATE: &str = "B10*PRO1*SHIP1*SCAC~\nAT7*X1*NS***20240101*1200~\n";

#[test]
fn an_x12_copy_under_fresh_control_numbers_has_the_same_fingerprint() {
    let original = fingerprints(&x12(1, 1, &[("0001", UPDATE)]));
    let copy = fingerprints(&x12(977, 12, &[("0419", UPDATE)]));
    assert_eq!(original, copy);
    // In a batch with other transactions, at another position, it is still the same.
    let batch =
        fingerprints(&x12(978, 13, &[("0001", "B10*PRO2*SHIP2*SCAC~\n"), ("0002", UPDATE)]));
    assert_eq!(batch[1], original[0]);
    assert_ne!(batch[0], original[0]);
}

#[test]
fn other_delimiters_and_line_layout_do_not_change_it() {
    let plain = x12(1, 1, &[("0001", UPDATE)]);
    let one_line = plain.replace('\n', "");
    // Element `|`, component `^`, terminator `!` (ISA16 and the ISA layout follow).
    let other = plain.replace('*', "|").replace('~', "!").replace("|>!", "|^!");
    assert_eq!(fingerprints(&plain), fingerprints(&one_line));
    assert_eq!(fingerprints(&plain), fingerprints(&other));
}

#[test]
fn any_change_of_content_changes_it() {
    let base = fingerprints(&x12(1, 1, &[("0001", UPDATE)]))[0];
    for changed in [
        UPDATE.replace("20240101*1200", "20240101*1201"),
        UPDATE.replace("PRO1*SHIP1", "PRO1S*HIP1"), // the same bytes split differently
        UPDATE.replace("AT7*X1*NS***", "AT7*X1*NS**"),
        UPDATE.replace("SCAC~", "SCAC*~"), // a trailing empty element
        format!("{UPDATE}AT7*X1*NS***20240101*1200~\n"),
    ] {
        let fp = fingerprints(&x12(1, 1, &[("0001", &changed)]))[0];
        assert_ne!(fp, base, "{changed}");
    }
    // Another document type with the same segments is another transaction.
    let invoice = x12(1, 1, &[("0001", UPDATE)]).replace("ST*214*", "ST*210*");
    assert_ne!(fingerprints(&invoice)[0], base);
}

fn edifact(una: &str, unb_ref: &str, unh_ref: &str, body: &str) -> String {
    let n = body.matches('\'').count() + 2;
    format!(
        "{una}UNB+UNOA:2+CARRIERA:ZZZ+ACME:ZZZ+240101:1200+{unb_ref}'UNH+{unh_ref}+IFTSTA:D:01B:UN'{body}UNT+{n}+{unh_ref}'UNZ+1+{unb_ref}'"
    )
}

#[test]
fn an_edifact_copy_has_the_same_fingerprint_and_releases_are_decoded() {
    let body = "BGM+77+SHIP1+9'STS+1+21?+22'";
    let original = fingerprints(&edifact("", "1", "1", body));
    let copy = fingerprints(&edifact("", "77", "M0419", body));
    assert_eq!(original, copy);
    // The same text under another release character (`!` declared in UNA).
    let other_release = edifact("UNA:+.! '", "78", "9", &body.replace("?+", "!+"));
    assert_eq!(original, fingerprints(&other_release));
    let changed = fingerprints(&edifact("", "1", "1", &body.replace("21?+22", "21?+23")));
    assert_ne!(original, changed);
}

#[test]
fn the_encoding_is_pinned() {
    // Stored fingerprints (redb, Redis) must stay valid: this value may only change with a
    // migration of what is stored.
    let fp = fingerprints(&x12(1, 1, &[("0001", UPDATE)]))[0];
    assert_eq!(fp.to_string().len(), 32);
    assert_eq!(fp.to_string(), PINNED, "the fingerprint encoding changed");
}

const PINNED: &str = "30c52c8350f8a8e0a42cfe409e804f57";
