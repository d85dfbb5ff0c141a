//! `tollgate edi inspect|ack|split`, run as the real binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// One of the project's own EDI fixtures (`testdata/edi`).
fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/edi")).join(rel)
}

fn tollgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tollgate")).args(args).output().expect("run tollgate")
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn json_lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort_unstable();
    k
}

#[test]
fn inspect_json_has_the_documented_shape_and_exit_1_on_envelope_errors() {
    let f = fixture("x12/310-wrong-trailers.edi");
    let out = tollgate(&["edi", "inspect", "--json", path(&f)]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let docs = json_lines(&out);
    assert_eq!(docs.len(), 1);
    let doc = &docs[0];
    assert_eq!(keys(doc), ["errors", "file", "interchanges"]);
    assert_eq!(doc["file"], path(&f));
    let ic = &doc["interchanges"][0];
    assert_eq!(
        keys(ic),
        ["control_number", "errors", "groups", "receiver", "sender", "standard", "test", "version"]
    );
    assert_eq!(ic["standard"], "x12");
    assert_eq!(ic["sender"], serde_json::json!({"qualifier": "ZZ", "id": "OCEANCO"}));
    assert_eq!(ic["receiver"], serde_json::json!({"qualifier": "02", "id": "ACMECORP"}));
    assert_eq!(ic["control_number"], "000011566");
    assert_eq!(ic["version"], "00401");
    assert_eq!(ic["test"], false);
    let g = &ic["groups"][0];
    assert_eq!(keys(g), ["control_number", "functional_id", "transactions", "version"]);
    assert_eq!(g["functional_id"], "IO");
    let tx = &g["transactions"][0];
    assert_eq!(keys(tx), ["control_number", "message_version", "segments", "type"]);
    assert_eq!(tx["type"], "310");
    assert_eq!(tx["segments"], 14);
    assert_eq!(tx["message_version"], Value::Null);
    let codes: Vec<&str> =
        ic["errors"].as_array().unwrap().iter().map(|e| e["code"].as_str().unwrap()).collect();
    assert_eq!(codes, ["AK5-4", "AK5-3", "AK9-5", "TA1-001"]);
    assert_eq!(keys(&ic["errors"][0]), ["code", "message", "offset", "segment"]);
    assert_eq!(ic["errors"][0]["segment"], 16);
}

#[test]
fn inspect_several_files_clean_and_edifact() {
    let a = fixture("x12/810-850-two-groups.edi");
    let b = fixture("edifact/invoic-una-release.edi");
    let out = tollgate(&["edi", "inspect", "--json", path(&a), path(&b)]);
    assert_eq!(out.status.code(), Some(0));
    let docs = json_lines(&out);
    assert_eq!(docs.len(), 2);
    assert_eq!(
        docs[0]["interchanges"][0]["groups"][0]["transactions"].as_array().unwrap().len(),
        2
    );
    let tx = &docs[1]["interchanges"][0]["groups"][0]["transactions"][0];
    assert_eq!(docs[1]["interchanges"][0]["standard"], "edifact");
    assert_eq!(docs[1]["interchanges"][0]["groups"][0]["functional_id"], Value::Null);
    assert_eq!(tx["type"], "INVOIC");
    assert_eq!(tx["message_version"], "D:97B:UN");
    // The human table names the parties and the documents.
    let out = tollgate(&["edi", "inspect", path(&a)]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ZZ:NORTHWIND -> ZZ:ACMECORP"), "{text}");
    assert!(text.contains("810"));
}

#[test]
fn inspect_exit_2_for_unreadable_files_and_files_without_interchange() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.edi");
    let out = tollgate(&["edi", "inspect", path(&missing)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.edi"));

    let junk = dir.path().join("junk.txt");
    std::fs::write(&junk, "hello, this is not EDI\n").unwrap();
    let out = tollgate(&["edi", "inspect", "--json", path(&junk)]);
    assert_eq!(out.status.code(), Some(2));
    let docs = json_lines(&out);
    assert_eq!(docs[0]["interchanges"].as_array().unwrap().len(), 0);
    assert!(docs[0]["errors"][0]["message"].as_str().unwrap().contains("no interchange"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not an X12 or EDIFACT file"), "{stderr}");

    let out = tollgate(&["edi", "inspect"]);
    assert_eq!(out.status.code(), Some(2), "usage error");
}

#[test]
fn ack_writes_a_997_with_swapped_parties() {
    let f = fixture("x12/855-po-ack.edi");
    let out = tollgate(&["edi", "ack", "--control-number", "4711", path(&f)]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let parsed = tollgate_edi::parse(&out.stdout);
    assert!(!parsed.has_errors(), "{parsed:?}");
    let ic = &parsed.interchanges[0];
    assert_eq!(ic.sender.to_string(), "ZZ:ACMECORP");
    assert_eq!(ic.receiver.to_string(), "ZZ:NORTHWIND");
    assert_eq!(ic.control_number.as_str(), "000004711");
    let tx = ic.transactions().next().unwrap();
    assert_eq!(tx.kind, "997");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("AK1*PR*5~"), "{text}");
    assert!(text.contains("AK2*855*0005~"));
    assert!(text.contains("AK9*A*1*1*1~"));
}

#[test]
fn ack_formats_and_acknowledgements() {
    let edifact = fixture("edifact/orders-group-wrong-unt.edi");
    let out = tollgate(&["edi", "ack", "--format", "contrl", path(&edifact)]);
    assert_eq!(out.status.code(), Some(1), "the CONTRL reports an envelope error");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("UCM+1+ORDERS:D:96B:UN+4+29'"), "{text}");
    // A 997 for EDIFACT does not apply.
    let out = tollgate(&["edi", "ack", "--format", "997", path(&edifact)]);
    assert_eq!(out.status.code(), Some(2));
    // An acknowledgement is never acknowledged.
    let ack = fixture("x12/997-three-interchanges.edi");
    let out = tollgate(&["edi", "ack", path(&ack)]);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("itself an acknowledgement"));
    // Unknown format: usage error.
    let out = tollgate(&["edi", "ack", "--format", "998", path(&ack)]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn split_per_transaction_writes_valid_interchanges() {
    let f = fixture("x12/810-850-two-groups.edi");
    let dir = tempfile::tempdir().unwrap();
    let out = tollgate(&[
        "edi",
        "split",
        "--per-transaction",
        "--out",
        path(dir.path()),
        "--control-number",
        "100",
        path(&f),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let mut files: Vec<_> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert_eq!(files.len(), 3);
    let mut seen = Vec::new();
    for file in &files {
        let parsed = tollgate_edi::parse(&std::fs::read(file).unwrap());
        assert!(!parsed.has_errors(), "{}: {parsed:?}", file.display());
        let ic = &parsed.interchanges[0];
        assert_eq!(ic.transactions().count(), 1);
        let tx = ic.transactions().next().unwrap();
        seen.push((ic.control_number.to_string(), tx.kind.clone(), tx.control_number.to_string()));
    }
    assert_eq!(
        seen,
        [
            ("000000100".to_string(), "810".to_string(), "000000001".to_string()),
            ("000000101".to_string(), "810".to_string(), "000000002".to_string()),
            ("000000102".to_string(), "850".to_string(), "000191240".to_string()),
        ]
    );
    let out = tollgate(&["edi", "split", "--out", path(dir.path()), path(&f)]);
    assert_eq!(out.status.code(), Some(2), "--per-transaction is required");
}

#[test]
fn ack_exit_codes_follow_inspect() {
    // Clean: 0. Envelope errors (the acknowledgement rejects something): 1, ack still written.
    let out = tollgate(&["edi", "ack", path(&fixture("x12/855-po-ack.edi"))]);
    assert_eq!(out.status.code(), Some(0));
    let out = tollgate(&["edi", "ack", path(&fixture("x12/310-wrong-trailers.edi"))]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("AK5*R*4*3"));
    // Unreadable: 2.
    let out = tollgate(&["edi", "ack", "/nonexistent/file.edi"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn split_refuses_a_truncated_interchange_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let full = std::fs::read_to_string(fixture("x12/810-850-two-groups.edi")).unwrap();
    // Cut the file inside the last transaction's last segment, before its terminator.
    let cut_at = full.find("CTT*2").unwrap() + "CTT*2".len();
    let file = dir.path().join("cut.edi");
    std::fs::write(&file, &full[..cut_at]).unwrap();
    let out_dir = dir.path().join("pieces");
    let out =
        tollgate(&["edi", "split", "--per-transaction", "--out", path(&out_dir), path(&file)]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`CTT*2`") && stderr.contains("no segment terminator"), "{stderr}");
    assert!(!out_dir.exists(), "no pieces written");
}

#[test]
fn ack_fills_a_missing_syntax_identifier_and_says_what_it_cannot_fill() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("no-s001.edi");
    std::fs::write(
        &file,
        "UNB+++RECEIVER:ZZZ+240102:0930+77'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+77'",
    )
    .unwrap();
    let out = tollgate(&["edi", "ack", path(&file)]);
    assert_eq!(out.status.code(), Some(1), "the CONTRL reports the input's errors");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("UNB+UNOA:3+RECEIVER:ZZZ+"), "{text}");
    // `inspect` finds S001 in the CONTRL; what is left is the recipient the input did not give.
    let contrl = dir.path().join("contrl.edi");
    std::fs::write(&contrl, &out.stdout).unwrap();
    let report = tollgate(&["edi", "inspect", "--json", path(&contrl)]);
    let doc = &json_lines(&report)[0];
    let errors = doc["interchanges"][0]["errors"].as_array().unwrap();
    let messages: Vec<&str> = errors.iter().map(|e| e["message"].as_str().unwrap()).collect();
    assert_eq!(messages, ["UNB S003 (interchange recipient) is missing"]);
    // The sender is missing in the input: the CONTRL cannot name its recipient, and says so.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-s001.edi: interchange 77: the input's UNB S002"), "{stderr}");
}

#[test]
fn split_pieces_of_a_short_header_are_read_by_inspect_with_no_new_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("short.edi");
    std::fs::write(
        &file,
        "UNB+XXXX'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNH+2+ORDERS:D:96A:UN'UNT+2+2'UNZ+2'",
    )
    .unwrap();
    let source = tollgate(&["edi", "inspect", "--json", path(&file)]);
    let codes = |out: &Output| -> Vec<String> {
        let doc = &json_lines(out)[0];
        let errors = doc["interchanges"][0]["errors"].as_array().unwrap();
        errors.iter().map(|e| e["code"].as_str().unwrap().to_string()).collect()
    };
    let source_codes = codes(&source);
    let out_dir = dir.path().join("pieces");
    let out =
        tollgate(&["edi", "split", "--per-transaction", "--out", path(&out_dir), path(&file)]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let mut pieces: Vec<_> =
        std::fs::read_dir(&out_dir).unwrap().map(|e| e.unwrap().path()).collect();
    pieces.sort();
    assert_eq!(pieces.len(), 2);
    for piece in &pieces {
        let out = tollgate(&["edi", "inspect", "--json", path(piece)]);
        assert_eq!(out.status.code(), Some(1), "S002 and S003 are still missing");
        for code in codes(&out) {
            assert!(source_codes.contains(&code), "{}: {code} is new", piece.display());
        }
        let text = std::fs::read_to_string(piece).unwrap();
        let cn = text.split_once("UNB+XXXX++++").unwrap().1.split('\'').next().unwrap();
        assert!(text.contains(&format!("UNZ+1+{cn}'")), "{text}");
    }
}

/// A reader that goes away (`| head`) ends `inspect` and `ack` with their own code for the file
/// (0 for a clean one, 1 for one with envelope errors), not a "cannot write" exit 2; a full
/// disk is still exit 2, named. `split` writes its pieces whoever reads their list.
#[test]
fn a_closed_or_full_standard_output_keeps_the_exit_code_scheme() {
    let clean = fixture("x12/810-850-two-groups.edi");
    let flawed = fixture("x12/310-wrong-trailers.edi");
    let run = |args: &[&str], stdout: std::process::Stdio| {
        Command::new(env!("CARGO_BIN_EXE_tollgate")).args(args).stdout(stdout).output().unwrap()
    };
    let closed = || {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        std::process::Stdio::from(writer)
    };
    for (file, code) in [(&clean, 0), (&flawed, 1)] {
        for args in [["edi", "inspect", path(file)], ["edi", "ack", path(file)]] {
            let out = run(&args, closed());
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
            assert!(!stderr.contains("cannot write") && !stderr.contains("panicked"), "{stderr}");

            let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
            let out = run(&args, full.into());
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert!(stderr.contains("cannot write the"), "{args:?}: {stderr}");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let args = ["edi", "split", "--per-transaction", "--out", path(dir.path()), path(&clean)];
    let out = run(&args, closed());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read_dir(dir.path()).unwrap().count() > 0, "pieces written");
}

/// Partner text reaches the terminal as text: an escape sequence in a sender id (here one that
/// would clear the screen and retitle the window) is shown escaped in the `inspect` table, as
/// it already is in `--json`.
#[test]
fn inspect_shows_control_characters_in_partner_text_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("evil.edi");
    let unb = "UNA:+.? 'UNB+UNOC:3+EVIL\u{1b}[2J\u{1b}]0;pwned\u{7}:14+ACME:14+261206:0500+1'\
               UNH+1+IFTSTA:D:01B:UN'BGM+23+1'UNT+3+1'UNZ+1+1'";
    std::fs::write(&file, unb).unwrap();
    let out = tollgate(&["edi", "inspect", path(&file)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.stdout.contains(&0x1b) && !out.stdout.contains(&0x07), "{text:?}");
    assert!(text.contains("EVIL\\u{1b}[2J\\u{1b}]0;pwned\\u{7}"), "{text}");
}
