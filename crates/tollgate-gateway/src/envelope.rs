//! Envelopes: what the gateway needs to know about the interchanges in a received file.
//!
//! This is the one place that talks to the EDI parser, and [`scan`] is the one call that parses:
//! once per received file, off the async runtime. It turns the parsed file into [`Envelope`]
//! summaries (parties, control number, document type, byte span, first error) and keeps, per
//! interchange, what the later steps need so that none of them parses again: its weight, for
//! split and transaction-dedup routes its [`Layout`] (the envelope outline and each
//! transaction's span, weight and, for dedup, fingerprint), and for an interchange with an
//! error the parsed interchange its acknowledgement is built from.

use std::ops::Range;

use serde::{Deserialize, Serialize};
use tollgate_edi::{Delimiters, RecordRule, Standard};
use tollgate_edi::{Outline, OutlineGroup};

/// One interchange of a received file, as the pipeline sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// Sender `QUAL:ID`, trimmed.
    pub sender: String,
    /// Receiver `QUAL:ID`, trimmed.
    pub receiver: String,
    /// Interchange control number.
    pub control_number: String,
    /// The first transaction's type (ST01 / UNH message type); empty when there is none.
    pub document: String,
    /// Bytes of the whole interchange in the file.
    pub span: Range<usize>,
    /// Number of transactions / messages.
    pub transactions: usize,
    /// The parser's first error for this interchange, with code, segment and offset.
    pub error: Option<String>,
    /// Records counted under the rule [`scan`] was given for this document (0 without one).
    pub records: u64,
    /// What splitting needs, when [`scan`] was asked to keep it.
    pub layout: Option<Layout>,
    /// The parsed interchange (spans relative to the file), kept only when it has an error:
    /// its acknowledgement is built from it.
    pub rejected: Option<Box<tollgate_edi::Interchange>>,
    /// The interchange may still be being written: it has no trailer (IEA / UNZ), or its bytes
    /// do not end with its segment terminator.
    pub unfinished: bool,
}

// The parser's model has no floating point: its equality is total.
impl Eq for Envelope {}

/// The interchanges of a file, or why there are none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// Interchanges in file order.
    pub envelopes: Vec<Envelope>,
    /// The parser's first file-level error (text outside any interchange).
    pub error: Option<String>,
    /// Every file-level error: its byte offset and description.
    pub file_errors: Vec<(usize, String)>,
}

impl Scan {
    /// The parser's first file-level error at a byte inside `run`, if any.
    pub fn file_errors_in(&self, run: &Range<usize>) -> Option<String> {
        self.file_errors.iter().find(|(at, _)| run.contains(at)).map(|(_, e)| e.clone())
    }
}

/// How [`scan`] weighs the interchanges of one document type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Weighing {
    /// What one record is.
    pub rule: tollgate_edi::RecordRule,
    /// Keep the [`Layout`] (the route splits, or removes resent transactions).
    pub layout: bool,
    /// Fingerprint each transaction into the layout (the route removes resent transactions).
    pub fingerprints: bool,
}

/// Parses `input` once and finds its interchanges; `weighing` says, per document type, how to
/// weigh an interchange (`None`: not at all, it has no route). Never panics.
pub(crate) fn scan(input: &[u8], weighing: impl Fn(&str) -> Option<Weighing>) -> Scan {
    let parsed = parse(input);
    let envelopes = parsed
        .interchanges
        .into_iter()
        .map(|ic| {
            let document = ic.transactions().next().map(|t| t.kind.clone()).unwrap_or_default();
            let how = weighing(&document);
            let mut records = 0;
            let mut layout = None;
            if let Some(w) = how {
                if w.layout || w.fingerprints {
                    let weights: Vec<u64> = ic
                        .transactions()
                        .map(|tx| tollgate_edi::transaction_records(input, tx, &w.rule, &ic))
                        .collect();
                    records = weights.iter().sum();
                    let mut l = Layout::new(&Outline::of(&ic), &weights);
                    if w.fingerprints {
                        l.fingerprints = ic
                            .transactions()
                            .map(|tx| tollgate_edi::fingerprint(input, tx, &ic).to_string())
                            .collect();
                    }
                    layout = Some(l);
                } else {
                    records = tollgate_edi::count_records(input, &ic, &w.rule);
                }
            }
            let error = ic.errors.first().map(describe);
            let unfinished = unfinished(input, &ic);
            Envelope {
                unfinished,
                sender: ic.sender.to_string(),
                receiver: ic.receiver.to_string(),
                control_number: ic.control_number.to_string(),
                document,
                span: ic.span.clone(),
                transactions: ic.transactions().count(),
                records,
                layout,
                rejected: error.is_some().then(|| Box::new(ic)),
                error,
            }
        })
        .collect();
    let file_errors: Vec<(usize, String)> =
        parsed.errors.iter().map(|e| (e.offset, describe(e))).collect();
    Scan { envelopes, error: file_errors.first().map(|(_, e)| e.clone()), file_errors }
}

/// No trailer, or the trailer segment has no terminator: the interchange ends with it.
fn unfinished(input: &[u8], ic: &tollgate_edi::Interchange) -> bool {
    use tollgate_edi::{ErrorKind, Level};
    let no_trailer = ic
        .errors
        .iter()
        .any(|e| e.kind == ErrorKind::MissingTrailer && e.level == Level::Interchange);
    let own = input.get(ic.span.clone()).unwrap_or_default();
    let terminated = match ic.delimiters.terminator().last() {
        Some(&t) if t.is_ascii_whitespace() => own.last() == Some(&t),
        Some(&t) => own.iter().rev().find(|b| !b.is_ascii_whitespace()) == Some(&t),
        None => false,
    };
    no_trailer || !terminated
}

/// The sender of the first interchange in the head of a file, for fair scheduling at intake
/// (empty when unknown). Envelopes only, on a few bytes: not the parse of the file.
pub(crate) fn sniff_sender(head: &[u8]) -> String {
    let found = tollgate_edi::scan(head, &tollgate_edi::RecordRule::Transactions);
    found.interchanges.first().map(|ic| ic.sender.to_string()).unwrap_or_default()
}

/// The only call into the parser's full parse.
fn parse(input: &[u8]) -> tollgate_edi::ParsedFile {
    #[cfg(test)]
    hooks::parsing(input);
    tollgate_edi::parse(input)
}

fn describe(e: &tollgate_edi::EnvelopeError) -> String {
    format!("{} at segment {} (byte {}): {}", e.code, e.segment, e.offset, e.message)
}

/// How [`scan`] weighs a route's interchanges: under `rule`, keeping the layout when the route
/// splits or removes resent transactions, with fingerprints for the latter.
pub(crate) fn weighing(rule: RecordRule, split: bool, fingerprints: bool) -> Weighing {
    Weighing { rule, layout: split || fingerprints, fingerprints }
}

/// What splitting an interchange needs, kept from the parse of its file and stored with its
/// item: the envelope outline and each transaction's span and weight. Spans are relative to
/// the start of the interchange. Stored as JSON (arrays of numbers, to stay small).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// `x12` or `edifact`.
    pub standard: String,
    /// Element, component, repetition, release and decimal characters, and the terminator.
    pub delimiters: Seps,
    /// The UNA service string advice, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub una: Option<(usize, usize)>,
    /// The ISA / UNB segment.
    pub header: (usize, usize),
    /// The groups in order.
    pub groups: Vec<LayoutGroup>,
    /// Each transaction's fingerprint in lowercase hex (see [`tollgate_edi::fingerprint`]), in
    /// order; empty unless the route removes resent transactions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fingerprints: Vec<String>,
}

/// The delimiters of a [`Layout`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seps {
    /// Data element separator.
    pub element: u8,
    /// Component separator.
    pub component: u8,
    /// Repetition separator.
    pub repetition: Option<u8>,
    /// Release character.
    pub release: Option<u8>,
    /// Decimal mark (EDIFACT).
    pub decimal: Option<u8>,
    /// Segment terminator.
    pub terminator: Vec<u8>,
}

/// One group of a [`Layout`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayoutGroup {
    /// The GS / UNG segment; `(0, 0)` for the implicit EDIFACT group.
    pub header: (usize, usize),
    /// GS06 / UNG 0048.
    pub control: Option<String>,
    /// Each transaction: start, end, weight.
    pub transactions: Vec<(usize, usize, u64)>,
}

fn pair(r: &Range<usize>) -> (usize, usize) {
    (r.start, r.end)
}

fn range((start, end): (usize, usize)) -> Range<usize> {
    start..end
}

impl Layout {
    /// The layout of an outline whose transactions weigh `weights` (in order; missing = 0).
    pub fn new(outline: &Outline, weights: &[u64]) -> Layout {
        let d = &outline.delimiters;
        let mut w = weights.iter().copied();
        Layout {
            standard: outline.standard.as_str().to_owned(),
            delimiters: Seps {
                element: d.element,
                component: d.component,
                repetition: d.repetition,
                release: d.release,
                decimal: d.decimal,
                terminator: d.terminator().to_vec(),
            },
            una: outline.una.as_ref().map(pair),
            header: pair(&outline.header),
            groups: outline
                .groups
                .iter()
                .map(|g| LayoutGroup {
                    header: pair(&g.header),
                    control: g.control_number.clone(),
                    transactions: g
                        .transactions
                        .iter()
                        .map(|t| (t.start, t.end, w.next().unwrap_or(0)))
                        .collect(),
                })
                .collect(),
            fingerprints: Vec::new(),
        }
    }

    /// How many transactions the interchange holds.
    pub fn transactions(&self) -> usize {
        self.groups.iter().map(|g| g.transactions.len()).sum()
    }

    /// The weight of each transaction, in order.
    pub fn weights(&self) -> Vec<u64> {
        self.groups.iter().flat_map(|g| g.transactions.iter().map(|t| t.2)).collect()
    }

    /// The parser's outline; `None` when the stored delimiters are not a valid set.
    fn outline(&self) -> Option<Outline> {
        let s = &self.delimiters;
        let (standard, delimiters) = match self.standard.as_str() {
            "x12" => (
                Standard::X12,
                Delimiters::x12(s.element, s.component, s.repetition, &s.terminator)?,
            ),
            "edifact" => {
                let [t] = s.terminator[..] else { return None };
                let d = Delimiters::edifact(
                    s.component,
                    s.element,
                    s.decimal?,
                    s.release,
                    s.repetition,
                    t,
                )?;
                (Standard::Edifact, d)
            }
            _ => return None,
        };
        Some(Outline {
            standard,
            delimiters,
            una: self.una.map(range),
            header: range(self.header),
            groups: self
                .groups
                .iter()
                .map(|g| OutlineGroup {
                    header: range(g.header),
                    control_number: g.control.clone(),
                    transactions: g.transactions.iter().map(|t| t.0..t.1).collect(),
                })
                .collect(),
        })
    }
}

/// The layout of one interchange given its bytes alone, weighed as `w` says: the fallback for
/// items stored without one (this parses the interchange).
pub(crate) fn layout_of(interchange: &[u8], w: Weighing) -> Option<Layout> {
    let w = Weighing { layout: true, ..w };
    scan(interchange, |_| Some(w)).envelopes.into_iter().next().and_then(|e| e.layout)
}

/// A new valid interchange holding the transactions at `keep` of the interchange `layout`
/// describes, with control number `control`, and the new interchange's own layout (its
/// transactions keep their weights and fingerprints). No parse: the bytes are cut where the
/// layout says.
pub(crate) fn split(
    interchange: &[u8],
    layout: &Layout,
    keep: &[usize],
    control: u64,
) -> Option<(Vec<u8>, Layout)> {
    let outline = layout.outline()?;
    let weights = layout.weights();
    let (bytes, piece) =
        tollgate_edi::split_outline(interchange, &outline, keep, &format!("{control:09}")).ok()?;
    let mut kept: Vec<usize> = keep.iter().copied().filter(|&i| i < weights.len()).collect();
    kept.sort_unstable();
    kept.dedup();
    let kept_weights: Vec<u64> = kept.iter().map(|&i| weights[i]).collect();
    let mut out = Layout::new(&piece, &kept_weights);
    out.fingerprints = kept.iter().filter_map(|&i| layout.fingerprints.get(i).cloned()).collect();
    Some((bytes, out))
}

/// The acknowledgement (TA1/997/999/CONTRL, chosen by the parser) for a rejected interchange,
/// from the parsed interchange [`scan`] kept and the bytes of its file.
pub(crate) fn acknowledge(
    file: &[u8],
    ic: &tollgate_edi::Interchange,
    control: u64,
) -> Option<Vec<u8>> {
    tollgate_edi::acknowledge(file, ic, tollgate_edi::AckFormat::Auto, control)
}

/// Test hooks on the one parse call: count the parses of inputs holding a marker, or make the
/// parse panic on them (the parser must never panic; this stands in for a bug in it).
#[cfg(test)]
pub(crate) mod hooks {
    use std::sync::Mutex;

    struct Watch {
        marker: Vec<u8>,
        parses: usize,
        threads: Vec<std::thread::ThreadId>,
        panic: bool,
    }

    static WATCHES: Mutex<Vec<Watch>> = Mutex::new(Vec::new());

    fn lock() -> std::sync::MutexGuard<'static, Vec<Watch>> {
        WATCHES.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts the parses of inputs containing `marker` from now on.
    pub(crate) fn count(marker: &str) {
        lock().push(Watch {
            marker: marker.as_bytes().to_vec(),
            parses: 0,
            threads: Vec::new(),
            panic: false,
        });
    }

    /// Makes every parse of an input containing `marker` panic.
    pub(crate) fn panic_on(marker: &str) {
        lock().push(Watch {
            marker: marker.as_bytes().to_vec(),
            parses: 0,
            threads: Vec::new(),
            panic: true,
        });
    }

    /// Parses of inputs containing `marker` so far.
    pub(crate) fn parses(marker: &str) -> usize {
        lock().iter().filter(|w| w.marker == marker.as_bytes()).map(|w| w.parses).sum()
    }

    /// The threads the parses of inputs containing `marker` ran on.
    pub(crate) fn threads(marker: &str) -> Vec<std::thread::ThreadId> {
        lock()
            .iter()
            .filter(|w| w.marker == marker.as_bytes())
            .flat_map(|w| w.threads.clone())
            .collect()
    }

    pub(super) fn parsing(input: &[u8]) {
        let mut panic = false;
        for w in lock().iter_mut() {
            if input.windows(w.marker.len()).any(|x| x == w.marker) {
                w.parses += 1;
                w.threads.push(std::thread::current().id());
                panic |= w.panic;
            }
        }
        if panic {
            panic!("injected parser panic");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_survives_json_and_gives_back_the_outline() {
        let x12 = b"ISA*00*          *00*          *ZZ*A              *ZZ*B              \
*240101*1200*U*00401*000000001*0*P*>~\nGS*QM*A*B*20240101*1200*7*X*004010~\n\
ST*214*0001~\nB10*1*2*S~\nSE*3*0001~\nST*214*0002~\nB10*1*2*S~\nAT7*X1~\nSE*4*0002~\n\
GE*2*7~\nIEA*1*000000001~\n";
        let edifact = b"UNA:+.? 'UNB+UNOA:3+A:ZZZ+B:ZZZ+240101:1200+42'\nUNH+1+IFTSTA:D:01B:UN'\n\
BGM+23+1'\nUNT+3+1'\nUNH+2+IFTSTA:D:01B:UN'\nBGM+23+2'\nUNT+3+2'\nUNZ+2+42'\n";
        for file in [&x12[..], &edifact[..]] {
            let p = tollgate_edi::parse(file);
            assert!(!p.has_errors(), "{p:?}");
            let outline = Outline::of(&p.interchanges[0]);
            let layout = Layout::new(&outline, &[3, 4]);
            let json = serde_json::to_string(&layout).unwrap();
            let back: Layout = serde_json::from_str(&json).unwrap();
            assert_eq!(back, layout);
            assert_eq!(back.outline(), Some(outline));
            assert_eq!(back.weights(), [3, 4]);
            let (piece, rest) = split(file, &back, &[1], 5).unwrap();
            assert_eq!(rest.weights(), [4]);
            let again = tollgate_edi::parse(&piece);
            assert!(!again.has_errors(), "{again:?}");
            assert_eq!(Some(Outline::of(&again.interchanges[0])), rest.outline());
        }
    }
}
