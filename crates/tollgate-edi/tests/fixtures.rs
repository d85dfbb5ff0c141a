//! Tollgate's own fixtures (`testdata/edi`, one layout a file): every file is read without
//! panic and passes the self-checks, and the facts below were verified by reading each file.

use std::path::PathBuf;

use tollgate_edi::{AckFormat, acknowledge};
use tollgate_edi::{Interchange, ParsedFile, RecordRule, Standard, count_records, parse};

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/edi"))
}

fn read(rel: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn load(rel: &str) -> (Vec<u8>, ParsedFile) {
    let bytes = read(rel);
    let parsed = parse(&bytes);
    (bytes, parsed)
}

fn codes(ic: &Interchange) -> Vec<&str> {
    ic.errors.iter().map(|e| e.code.as_str()).collect()
}

fn txs(ic: &Interchange) -> Vec<(String, String, usize)> {
    ic.transactions().map(|t| (t.kind.clone(), t.control_number.to_string(), t.segments)).collect()
}

#[test]
fn every_fixture_is_read_and_passes_the_self_checks() {
    let mut files = 0;
    for dir in ["x12", "edifact"] {
        for entry in std::fs::read_dir(fixtures().join(dir)).unwrap() {
            tollgate_edi::self_check_file(&entry.unwrap().path());
            files += 1;
        }
    }
    assert!(files >= 19, "only {files} fixtures found in testdata/edi");
}

#[test]
fn ts214_with_a_multi_byte_terminator() {
    let (bytes, p) = load("x12/214-multibyte-terminator.edi");
    assert!(p.errors.is_empty());
    let ic = &p.interchanges[0];
    assert_eq!(ic.delimiters.terminator(), "…".as_bytes());
    assert_eq!(ic.sender.to_string(), "ZZ:SWIFTLINE");
    assert_eq!(ic.receiver.to_string(), "ZZ:ACMECORP");
    assert_eq!(ic.control_number.as_str(), "000041207");
    assert_eq!(ic.version, "00400");
    assert_eq!(ic.groups[0].functional_id.as_deref(), Some("QM"));
    assert_eq!(ic.groups[0].control_number.as_ref().unwrap().as_str(), "41207");
    assert_eq!(txs(ic), [("214".into(), "412070001".into(), 15)]);
    assert!(ic.errors.is_empty());
    let at7: RecordRule = "segment:AT7".parse().unwrap();
    assert_eq!(count_records(&bytes, ic, &at7), 2);
    assert_eq!(count_records(&bytes, ic, &RecordRule::Transactions), 1);
}

#[test]
fn ts210_wrapped_at_80_columns() {
    let (_, p) = load("x12/210-wrapped-80.edi");
    let ic = &p.interchanges[0];
    assert_eq!(ic.sender.to_string(), "ZZ:SWIFTLINE");
    assert_eq!(ic.receiver.to_string(), "ZZ:ACMECORP");
    // ISA10 is wrapped as `022` / `4`, the ST tag as `S` / `T`.
    assert_eq!(ic.time, "0224");
    assert_eq!(ic.control_number.as_str(), "000026114");
    assert_eq!(ic.groups[0].functional_id.as_deref(), Some("IM"));
    assert_eq!(txs(ic), [("210".into(), "1305".into(), 21)]);
    assert!(ic.errors.is_empty(), "{:?}", ic.errors);
}

#[test]
fn two_groups_of_different_versions() {
    let (_, p) = load("x12/810-850-two-groups.edi");
    let ic = &p.interchanges[0];
    assert!(ic.test);
    let groups: Vec<_> = ic
        .groups
        .iter()
        .map(|g| (g.functional_id.clone().unwrap(), g.version.clone().unwrap()))
        .collect();
    assert_eq!(groups, [("IN".into(), "004010".into()), ("PO".into(), "003010".into())]);
    assert_eq!(
        txs(ic),
        [
            ("810".into(), "000000001".into(), 13),
            ("810".into(), "000000002".into(), 9),
            ("850".into(), "000191240".into(), 7)
        ]
    );
    assert!(ic.errors.is_empty());
}

#[test]
fn several_interchanges_of_acknowledgements_are_not_acknowledged() {
    let (bytes, p) = load("x12/997-three-interchanges.edi");
    let numbers: Vec<_> = p.interchanges.iter().map(|i| i.control_number.to_string()).collect();
    assert_eq!(numbers, ["000000001", "000000002", "000000003"]);
    for ic in &p.interchanges {
        assert!(ic.is_acknowledgement());
        assert!(ic.errors.is_empty());
        assert_eq!(ic.delimiters.repetition, Some(b'^'));
        assert_eq!(acknowledge(&bytes, ic, AckFormat::Auto, 1), None);
    }
}

#[test]
fn ts310_with_wrong_trailers_everywhere() {
    let (_, p) = load("x12/310-wrong-trailers.edi");
    let ic = &p.interchanges[0];
    assert_eq!(ic.receiver.to_string(), "02:ACMECORP");
    assert_eq!(txs(ic), [("310".into(), "35353".into(), 14)]);
    assert_eq!(codes(ic), ["AK5-4", "AK5-3", "AK9-5", "TA1-001"]);
    assert!(ic.errors[0].message.contains("`49`"));
    assert!(ic.errors[1].message.contains("35354"));
    assert!(ic.errors[3].message.contains("000011567"));
}

#[test]
fn ts271_ends_without_ge_and_iea() {
    let (_, p) = load("x12/271-no-trailers.edi");
    let ic = &p.interchanges[0];
    assert_eq!(ic.version, "00501");
    assert_eq!(ic.delimiters.repetition, Some(b'^'));
    assert_eq!(txs(ic), [("271".into(), "000000001".into(), 10)]);
    assert_eq!(codes(ic), ["AK9-3", "TA1-023"]);
    assert!(!ic.complete);
}

#[test]
fn two_interchanges_without_repetition_separator() {
    let (_, p) = load("x12/850-two-interchanges.edi");
    assert_eq!(p.interchanges.len(), 2);
    for ic in &p.interchanges {
        assert_eq!(ic.control_number.as_str(), "000003438");
        assert_eq!(ic.sender.to_string(), "12:4405197800");
        // ISA11 is `U` under 00400: no repetition separator.
        assert_eq!(ic.delimiters.repetition, None);
        assert_eq!(txs(ic), [("850".into(), "000000010".into(), 9)]);
    }
    assert!(p.interchanges[0].span.end <= p.interchanges[1].span.start);
}

#[test]
fn line_feed_terminator_and_no_final_terminator() {
    let (_, p) = load("x12/856-lf-terminator.edi");
    let ic = &p.interchanges[0];
    assert_eq!(ic.delimiters.terminator(), b"\n");
    assert_eq!(txs(ic), [("856".into(), "0008".into(), 11)]);
    assert!(ic.complete);
    assert!(ic.errors.is_empty());
}

#[test]
fn repetition_separator_from_00406() {
    let (_, p) = load("x12/856-repetition-00406.edi");
    let ic = &p.interchanges[0];
    assert_eq!(ic.version, "00406");
    assert_eq!(ic.delimiters.repetition, Some(b'!'));
    assert_eq!(txs(ic), [("856".into(), "0009".into(), 11)]);
}

#[test]
fn interchange_service_segments_are_allowed() {
    let (_, p) = load("x12/997-interchange-services.edi");
    let ic = &p.interchanges[0];
    assert!(ic.errors.is_empty(), "{:?}", ic.errors);
    assert!(ic.is_acknowledgement());
    assert_eq!(ic.sender.to_string(), "ZZ:ACMEHEALTH");
}

#[test]
fn iftsta_with_mismatched_unz_reference() {
    let (bytes, p) = load("edifact/iftsta-unz-mismatch.edi");
    let ic = &p.interchanges[0];
    assert_eq!(ic.standard, Standard::Edifact);
    assert_eq!(ic.version, "UNOC:2");
    assert_eq!(ic.sender.to_string(), "ZZZ:RAILCO");
    assert_eq!(ic.control_number.as_str(), "4410021");
    let tx = ic.transactions().next().unwrap();
    assert_eq!((tx.kind.as_str(), tx.control_number.as_str()), ("IFTSTA", "4410077"));
    assert_eq!(tx.message_version.as_deref(), Some("D:00B:UN"));
    assert_eq!(tx.segments, 18);
    assert_eq!(codes(ic), ["UCI-28"]);
    assert!(ic.errors[0].message.contains("4410027"));
    assert_eq!(count_records(&bytes, ic, &"segment:STS".parse().unwrap()), 3);
}

#[test]
fn orders_in_an_explicit_group_with_a_wrong_unt_count() {
    let (_, p) = load("edifact/orders-group-wrong-unt.edi");
    let ic = &p.interchanges[0];
    assert!(ic.test);
    let g = &ic.groups[0];
    assert_eq!(g.functional_id.as_deref(), Some("ORDERS"));
    assert_eq!(g.version.as_deref(), Some("D:96A:EAN008"));
    assert_eq!(g.application_sender.as_ref().unwrap().to_string(), "14:5412345000013");
    assert_eq!(txs(ic), [("ORDERS".into(), "1".into(), 11)]);
    assert_eq!(codes(ic), ["UCM-29"]);
    assert_eq!(ic.errors[0].transaction, Some(0));
}

#[test]
fn una_with_other_separators_and_a_released_component_separator() {
    let (_, p) = load("edifact/invoic-una-release.edi");
    let ic = &p.interchanges[0];
    assert_eq!(ic.delimiters.element, b'*');
    assert_eq!(ic.delimiters.component, b'=');
    assert_eq!(ic.delimiters.release, Some(b'?'));
    assert_eq!(ic.delimiters.terminator(), b"~");
    assert_eq!(ic.receiver.to_string(), "ZZ:ACME=RENO");
    assert_eq!(txs(ic), [("INVOIC".into(), "00000000000117".into(), 16)]);
    assert!(ic.errors.is_empty());
}

#[test]
fn wrapped_edifact_reads_like_the_unwrapped_file() {
    let (_, wrapped) = load("edifact/invoic-wrapped.edi");
    let (_, plain) = load("edifact/invoic-plain.edi");
    let (w, p) = (&wrapped.interchanges[0], &plain.interchanges[0]);
    assert_eq!(w.control_number.as_str(), "00000000000778");
    assert_eq!(txs(w), txs(p));
    assert_eq!(txs(w), [("INVOIC".into(), "00000000000117".into(), 16)]);
    assert!(w.errors.is_empty() && p.errors.is_empty());
}

#[test]
fn pnrgov_with_backslash_release_character() {
    let (_, p) = load("edifact/pnrgov-backslash-release.edi");
    let ic = &p.interchanges[0];
    assert_eq!(ic.delimiters.release, Some(b'\\'));
    assert_eq!(ic.version, "IATA:1");
    let tx = ic.transactions().next().unwrap();
    assert_eq!(tx.kind, "PNRGOV");
    assert_eq!(tx.segments, 13);
    assert_eq!(tx.message_version.as_deref(), Some("11:1:IA"));
    assert!(ic.errors.is_empty());
}

#[test]
fn one_line_baplie_is_a_test_interchange() {
    let (bytes, p) = load("edifact/baplie-one-line.edi");
    assert!(!bytes.contains(&b'\n'));
    let ic = &p.interchanges[0];
    assert!(ic.test);
    assert!(!ic.ack_requested);
    assert_eq!(ic.sender.to_string(), "ZZZ:OCEANCO");
    assert_eq!(txs(ic), [("BAPLIE".into(), "1".into(), 11)]);
    assert!(ic.errors.is_empty());
}

#[test]
fn a_bare_message_without_unb_is_no_interchange() {
    let (_, p) = load("edifact/coprar-no-unb.edi");
    assert!(p.interchanges.is_empty());
    assert_eq!(p.errors.len(), 1);
    assert_eq!(p.errors[0].code, "FILE");
    assert!(p.errors[0].message.contains("no interchange"));
    assert!(p.errors[0].message.contains("UNH+638"));
}
