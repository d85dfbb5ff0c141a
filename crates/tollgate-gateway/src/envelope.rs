//! Envelopes: what the gateway needs to know about the interchanges in a received file.
//!
//! This is the one place that talks to the EDI parser. It turns a parsed file into
//! [`Envelope`] summaries (parties, control number, document type, byte span, first error) and
//! offers weighing, splitting and acknowledging of one interchange given its bytes.

use std::ops::Range;

use tollgate_edi::RecordRule;

/// One interchange of a received file, as the pipeline sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

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

/// Finds the interchanges in `input`. Never panics.
pub fn scan(input: &[u8]) -> Scan {
    let parsed = tollgate_edi::parse(input);
    let envelopes = parsed
        .interchanges
        .iter()
        .map(|ic| Envelope {
            sender: ic.sender.to_string(),
            receiver: ic.receiver.to_string(),
            control_number: ic.control_number.to_string(),
            document: ic.transactions().next().map(|t| t.kind.clone()).unwrap_or_default(),
            span: ic.span.clone(),
            transactions: ic.transactions().count(),
            error: ic.errors.first().map(describe),
        })
        .collect();
    let file_errors: Vec<(usize, String)> =
        parsed.errors.iter().map(|e| (e.offset, describe(e))).collect();
    Scan { envelopes, error: file_errors.first().map(|(_, e)| e.clone()), file_errors }
}

fn describe(e: &tollgate_edi::EnvelopeError) -> String {
    format!("{} at segment {} (byte {}): {}", e.code, e.segment, e.offset, e.message)
}

/// Parses the bytes of one interchange (as cut out by [`Envelope::span`]).
fn single(interchange: &[u8]) -> Option<tollgate_edi::Interchange> {
    tollgate_edi::parse(interchange).interchanges.into_iter().next()
}

/// The weight of one interchange under `rule`.
pub fn weight(interchange: &[u8], rule: &RecordRule) -> u64 {
    single(interchange).map_or(0, |ic| tollgate_edi::count_records(interchange, &ic, rule))
}

/// The weight of each transaction of one interchange, in order.
pub fn transaction_weights(interchange: &[u8], rule: &RecordRule) -> Vec<u64> {
    let Some(ic) = single(interchange) else { return Vec::new() };
    ic.transactions()
        .map(|tx| tollgate_edi::transaction_records(interchange, tx, rule, &ic))
        .collect()
}

/// A new valid interchange holding the transactions at `keep`, with control number `control`.
pub fn split(interchange: &[u8], keep: &[usize], control: u64) -> Option<Vec<u8>> {
    let ic = single(interchange)?;
    tollgate_edi::split::split(interchange, &ic, keep, &format!("{control:09}")).ok()
}

/// The acknowledgement (TA1/997/999/CONTRL, chosen by the parser) for a rejected interchange.
pub fn acknowledge(interchange: &[u8], control: u64) -> Option<Vec<u8>> {
    let ic = single(interchange)?;
    tollgate_edi::ack::acknowledge(interchange, &ic, tollgate_edi::ack::AckFormat::Auto, control)
}
