//! Property tests: random valid interchanges (random delimiters, values escaped with the release
//! character, CR/LF or not) parse back to the generated structure without errors, and splitting
//! then parsing gives back the same transactions.

use proptest::prelude::*;
use tollgate_edi::{Outline, split, split_outline};
use tollgate_edi::{ParsedFile, Standard, parse};

#[derive(Debug, Clone)]
struct Tx {
    kind: String,
    control: String,
    body: Vec<(String, Vec<String>)>,
}

#[derive(Debug, Clone)]
struct Grp {
    id: String,
    control: String,
    txs: Vec<Tx>,
}

#[derive(Debug, Clone)]
struct Spec {
    sender: String,
    receiver: String,
    control: String,
    groups: Vec<Grp>,
}

/// Values made of letters, digits and spaces inside (never at the ends).
fn word() -> impl Strategy<Value = String> {
    "[A-Z0-9]{1,4}( [A-Z0-9]{1,4})?"
}

fn body() -> impl Strategy<Value = Vec<(String, Vec<String>)>> {
    prop::collection::vec(
        (
            prop::sample::select(vec!["B10", "AT7", "N1", "L11", "MS1", "LX", "BGM", "STS"]),
            prop::collection::vec(word(), 1..4),
        )
            .prop_map(|(t, v)| (t.to_string(), v)),
        0..5,
    )
}

fn spec(max_groups: usize) -> impl Strategy<Value = Spec> {
    let tx = (prop::sample::select(vec!["214", "810", "IFTSTA", "856"]), body());
    let group = ("[A-Z]{2}", "[1-9][0-9]{0,5}", prop::collection::vec(tx, 0..4));
    ("[A-Z0-9]{1,12}", "[A-Z0-9]{1,12}", "[0-9]{9}", prop::collection::vec(group, 1..=max_groups))
        .prop_map(|(sender, receiver, control, groups)| Spec {
            sender,
            receiver,
            control,
            groups: groups
                .into_iter()
                .enumerate()
                .map(|(gi, (id, control, txs))| Grp {
                    id,
                    control: format!("{control}{gi}"),
                    txs: txs
                        .into_iter()
                        .enumerate()
                        .map(|(ti, (kind, body))| Tx {
                            kind: kind.to_string(),
                            control: format!("{:04}", ti + 1),
                            body,
                        })
                        .collect(),
                })
                .collect(),
        })
}

/// X12 delimiters: element, component, terminator (distinct), optional repetition.
fn x12_delims() -> impl Strategy<Value = (char, char, String, Option<char>)> {
    let seps = vec!['*', '|', '^', '!', '\u{1e}', '\u{1f}', '@'];
    let terms = vec!["~", "\n", "'", "…", "\u{1c}", "\r"];
    (prop::sample::subsequence(seps, 3).prop_shuffle(), prop::sample::select(terms), any::<bool>())
        .prop_map(|(s, t, rep)| (s[0], s[1], t.to_string(), rep.then_some(s[2])))
}

fn x12_file(spec: &Spec, d: &(char, char, String, Option<char>), eol: &str) -> String {
    let (e, c, t, rep) = d;
    let eol = if t == "\n" || t == "\r" { "" } else { eol };
    let (version, isa11) = match rep {
        Some(r) => ("00501", *r),
        None => ("00401", 'U'),
    };
    let mut s = format!(
        "ISA{e}00{e}          {e}00{e}          {e}ZZ{e}{:<15}{e}ZZ{e}{:<15}{e}240102{e}0930{e}{isa11}{e}{version}{e}{}{e}0{e}P{e}{c}{t}{eol}",
        spec.sender, spec.receiver, spec.control
    );
    for g in &spec.groups {
        s.push_str(&format!(
            "GS{e}{}{e}A{e}B{e}20240102{e}0930{e}{}{e}X{e}004010{t}{eol}",
            g.id, g.control
        ));
        for tx in &g.txs {
            s.push_str(&format!("ST{e}{}{e}{}{t}{eol}", tx.kind, tx.control));
            for (tag, values) in &tx.body {
                let joined: Vec<String> =
                    values.iter().map(|v| v.replace(' ', &c.to_string())).collect();
                s.push_str(&format!("{tag}{e}{}{t}{eol}", joined.join(&e.to_string())));
            }
            s.push_str(&format!("SE{e}{}{e}{}{t}{eol}", tx.body.len() + 2, tx.control));
        }
        s.push_str(&format!("GE{e}{}{e}{}{t}{eol}", g.txs.len(), g.control));
    }
    s.push_str(&format!("IEA{e}{}{e}{}{t}{eol}", spec.groups.len(), spec.control));
    s
}

/// EDIFACT service characters (component, element, release, terminator), or level A.
fn edifact_delims() -> impl Strategy<Value = Option<[char; 4]>> {
    let chars = vec![':', '+', '?', '\'', '*', '=', '~', '!', '|', '#'];
    prop::option::of(
        prop::sample::subsequence(chars, 4).prop_shuffle().prop_map(|v| [v[0], v[1], v[2], v[3]]),
    )
}

/// Escapes service characters with the release character.
fn esc(value: &str, d: &[char; 4]) -> String {
    let mut out = String::new();
    for ch in value.chars() {
        if d.contains(&ch) {
            out.push(d[2]);
        }
        out.push(ch);
    }
    out
}

fn edifact_file(
    spec: &Spec,
    una: Option<[char; 4]>,
    eol: &str,
    grouped: bool,
    nasty: &str,
) -> (String, String) {
    let d = una.unwrap_or([':', '+', '?', '\'']);
    let [c, e, _, t] = d;
    let mut s = String::new();
    if una.is_some() {
        s.push_str(&format!("UNA{c}{e}.{} {t}{eol}", d[2]));
    }
    // The sender id carries every service character, escaped.
    let sender = format!("{}{nasty}", spec.sender);
    s.push_str(&format!(
        "UNB{e}UNOC{c}3{e}{}{c}ZZZ{e}{}{c}ZZZ{e}240102{c}0930{e}{}{t}{eol}",
        esc(&sender, &d),
        spec.receiver,
        spec.control
    ));
    let mut messages = 0;
    for g in &spec.groups {
        if grouped {
            s.push_str(&format!(
                "UNG{e}{}{e}A{e}B{e}240102{c}0930{e}{}{e}UN{e}D{c}01B{t}{eol}",
                g.id, g.control
            ));
        }
        for tx in &g.txs {
            messages += 1;
            s.push_str(&format!("UNH{e}{}{e}{}{c}D{c}01B{c}UN{t}{eol}", tx.control, tx.kind));
            for (tag, values) in &tx.body {
                let v: Vec<String> =
                    values.iter().map(|v| esc(&format!("{v}{nasty}"), &d)).collect();
                s.push_str(&format!("{tag}{e}{}{t}{eol}", v.join(&e.to_string())));
            }
            s.push_str(&format!("UNT{e}{}{e}{}{t}{eol}", tx.body.len() + 2, tx.control));
        }
        if grouped {
            s.push_str(&format!("UNE{e}{}{e}{}{t}{eol}", g.txs.len(), g.control));
        }
    }
    let count = if grouped { spec.groups.len() } else { messages };
    s.push_str(&format!("UNZ{e}{count}{e}{}{t}{eol}", spec.control));
    (s, sender)
}

fn expected_txs(spec: &Spec) -> Vec<(String, String, usize)> {
    spec.groups
        .iter()
        .flat_map(|g| g.txs.iter())
        .map(|t| (t.kind.clone(), t.control.clone(), t.body.len() + 2))
        .collect()
}

fn actual_txs(p: &ParsedFile) -> Vec<(String, String, usize)> {
    p.interchanges
        .iter()
        .flat_map(|i| i.transactions())
        .map(|t| (t.kind.clone(), t.control_number.to_string(), t.segments))
        .collect()
}

fn check_split(bytes: &[u8], p: &ParsedFile, keep: &[usize]) {
    let ic = &p.interchanges[0];
    let all: Vec<_> = ic.transactions().collect();
    let piece = split(bytes, ic, keep, "123").expect("splits");
    let back = parse(&piece);
    assert!(
        !back.has_errors(),
        "split output has errors: {back:?}\n{}",
        String::from_utf8_lossy(&piece)
    );
    let mut want: Vec<usize> = keep.iter().copied().filter(|&k| k < all.len()).collect();
    want.sort_unstable();
    want.dedup();
    let want: Vec<_> = want
        .iter()
        .map(|&k| (all[k].kind.clone(), all[k].control_number.to_string(), all[k].segments))
        .collect();
    assert_eq!(actual_txs(&back), want);
    assert_eq!(back.interchanges[0].sender, ic.sender);

    // Without a parse: the outline kept from the whole file gives the same piece, and the
    // piece's own outline is what parsing it finds, so it splits again without a parse.
    let (same, outline) =
        split_outline(&bytes[ic.span.clone()], &Outline::of(ic), keep, "123").expect("splits");
    assert_eq!(same, piece);
    assert_eq!(outline, Outline::of(&back.interchanges[0]));
    let again = split(&piece, &back.interchanges[0], &[0], "124").expect("splits");
    let (again2, _) = split_outline(&piece, &outline, &[0], "124").expect("splits");
    assert_eq!(again2, again);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn x12_parses_back_to_what_was_generated(
        spec in spec(3),
        d in x12_delims(),
        eol in prop::sample::select(vec!["", "\n", "\r\n"]),
        keep in prop::collection::vec(0usize..12, 0..6),
    ) {
        let file = x12_file(&spec, &d, eol);
        let p = parse(file.as_bytes());
        prop_assert!(!p.has_errors(), "{:?}\n{file:?}", p);
        prop_assert_eq!(p.interchanges.len(), 1);
        let ic = &p.interchanges[0];
        prop_assert_eq!(ic.standard, Standard::X12);
        prop_assert_eq!(&ic.sender.id, &spec.sender);
        prop_assert_eq!(&ic.receiver.id, &spec.receiver);
        prop_assert_eq!(ic.control_number.as_str(), spec.control.as_str());
        prop_assert_eq!(ic.delimiters.terminator(), d.2.as_bytes());
        prop_assert_eq!(ic.delimiters.repetition, d.3.map(|r| r as u8));
        let groups: Vec<_> = ic.groups.iter().map(|g| (g.functional_id.clone().unwrap(), g.control_number.clone().unwrap().0)).collect();
        let want: Vec<_> = spec.groups.iter().map(|g| (g.id.clone(), g.control.clone())).collect();
        prop_assert_eq!(groups, want);
        prop_assert_eq!(actual_txs(&p), expected_txs(&spec));
        check_split(file.as_bytes(), &p, &keep);
        tollgate_edi::self_check(file.as_bytes());
    }

    #[test]
    fn edifact_parses_back_to_what_was_generated(
        spec in spec(2),
        una in edifact_delims(),
        eol in prop::sample::select(vec!["", "\n", "\r\n"]),
        grouped in any::<bool>(),
        nasty in prop::sample::select(vec!["", "?", "??", "'", "+:'?", "=~!|#*"]),
        keep in prop::collection::vec(0usize..8, 0..4),
    ) {
        let (file, sender) = edifact_file(&spec, una, eol, grouped, nasty);
        let p = parse(file.as_bytes());
        prop_assert!(!p.has_errors(), "{:?}\n{file:?}", p);
        prop_assert_eq!(p.interchanges.len(), 1);
        let ic = &p.interchanges[0];
        prop_assert_eq!(ic.standard, Standard::Edifact);
        prop_assert_eq!(&ic.sender.id, &sender);
        prop_assert_eq!(ic.sender.qualifier.as_str(), "ZZZ");
        prop_assert_eq!(ic.control_number.as_str(), spec.control.as_str());
        prop_assert_eq!(ic.counts.groups as usize, if grouped { spec.groups.len() } else { 0 });
        prop_assert_eq!(actual_txs(&p), expected_txs(&spec));
        check_split(file.as_bytes(), &p, &keep);
        tollgate_edi::self_check(file.as_bytes());
    }
}
