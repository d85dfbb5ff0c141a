//! Envelopes: what the gateway needs to know about the interchanges in a received file.
//!
//! This is the one place that talks to the EDI parser. It turns a parsed file into
//! [`Envelope`] summaries (parties, control number, document type, byte span, first error) and
//! offers weighing, splitting and acknowledging of one interchange given its bytes.

use std::ops::Range;

use crate::config::WeightRule;

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
}

/// Finds the interchanges in `input`. Never panics.
pub fn scan(input: &[u8]) -> Scan {
    let (ics, error) = provisional::parse(input);
    let envelopes = ics
        .iter()
        .map(|ic| Envelope {
            sender: ic.sender.clone(),
            receiver: ic.receiver.clone(),
            control_number: ic.control.clone(),
            document: ic.txs.first().map(|t| t.kind.clone()).unwrap_or_default(),
            span: ic.span.clone(),
            transactions: ic.txs.len(),
            error: ic.error.clone(),
        })
        .collect();
    Scan { envelopes, error }
}

fn single(interchange: &[u8]) -> Option<provisional::Ic> {
    provisional::parse(interchange).0.into_iter().next()
}

/// The weight of one interchange under `rule`.
pub fn weight(interchange: &[u8], r: &WeightRule) -> u64 {
    transaction_weights(interchange, r).iter().sum()
}

/// The weight of each transaction of one interchange, in order.
pub fn transaction_weights(interchange: &[u8], r: &WeightRule) -> Vec<u64> {
    let Some(ic) = single(interchange) else { return Vec::new() };
    ic.txs
        .iter()
        .map(|t| match r {
            WeightRule::Transactions => 1,
            WeightRule::Segment(tag) => t
                .segments
                .iter()
                .filter(|s| s.split(|&b| b == ic.sep).next() == Some(tag.as_bytes()))
                .count() as u64,
        })
        .collect()
}

/// A new valid interchange holding the transactions at `keep`, with control number `control`.
pub fn split(interchange: &[u8], keep: &[usize], control: u64) -> Option<Vec<u8>> {
    let ic = single(interchange)?;
    let sep = ic.sep as char;
    let term = ic.term as char;
    let isa = String::from_utf8_lossy(&ic.isa).into_owned();
    let mut parts: Vec<&str> = isa.split(sep).collect();
    let cn = format!("{control:09}");
    if parts.len() < 17 {
        return None;
    }
    parts[13] = &cn;
    let mut out = parts.join(&sep.to_string());
    out.push(term);
    out.push_str(&String::from_utf8_lossy(&ic.gs));
    out.push(term);
    let gs06 = String::from_utf8_lossy(&ic.gs).split(sep).nth(6).unwrap_or("1").to_owned();
    let mut n = 0;
    for &k in keep {
        let t = ic.txs.get(k)?;
        for s in &t.segments {
            out.push_str(&String::from_utf8_lossy(s));
            out.push(term);
        }
        n += 1;
    }
    out.push_str(&format!("GE{sep}{n}{sep}{gs06}{term}IEA{sep}1{sep}{cn}{term}"));
    Some(out.into_bytes())
}

/// The acknowledgement (TA1/997/999/CONTRL, chosen by the parser) for a rejected interchange.
pub fn acknowledge(_interchange: &[u8], _control: u64) -> Option<Vec<u8>> {
    None
}

/// A stand-in X12 envelope reader used until the `tollgate-edi` parser is available.
mod provisional {
    use std::ops::Range;

    pub struct Tx {
        pub kind: String,
        pub segments: Vec<Vec<u8>>,
    }
    pub struct Ic {
        pub sender: String,
        pub receiver: String,
        pub control: String,
        pub span: Range<usize>,
        pub txs: Vec<Tx>,
        pub error: Option<String>,
        pub sep: u8,
        pub term: u8,
        pub isa: Vec<u8>,
        pub gs: Vec<u8>,
    }

    fn el(seg: &[u8], sep: u8, i: usize) -> String {
        seg.split(|&b| b == sep)
            .nth(i)
            .map(|e| String::from_utf8_lossy(e).trim().to_owned())
            .unwrap_or_default()
    }

    pub fn parse(input: &[u8]) -> (Vec<Ic>, Option<String>) {
        let mut out = Vec::new();
        let mut pos = 0;
        let mut error = None;
        loop {
            while pos < input.len() && (input[pos].is_ascii_whitespace() || input[pos] >= 0x80) {
                pos += 1;
            }
            if pos >= input.len() {
                break;
            }
            if !input[pos..].starts_with(b"ISA") || input.len() < pos + 106 {
                error = Some(format!(
                    "E001 at segment 0 (byte {pos}): expected ISA or UNB, found {:?}",
                    String::from_utf8_lossy(&input[pos..input.len().min(pos + 8)])
                ));
                break;
            }
            let sep = input[pos + 3];
            let term = input[pos + 105];
            let start = pos;
            let mut ic = Ic {
                sender: String::new(),
                receiver: String::new(),
                control: String::new(),
                span: start..start,
                txs: Vec::new(),
                error: None,
                sep,
                term,
                isa: Vec::new(),
                gs: Vec::new(),
            };
            let mut cur: Option<Tx> = None;
            let mut end = None;
            let mut i = pos;
            while i < input.len() {
                let stop =
                    input[i..].iter().position(|&b| b == term).map_or(input.len(), |p| i + p);
                let seg_start =
                    i + input[i..stop].iter().take_while(|b| **b == b'\r' || **b == b'\n').count();
                let seg = &input[seg_start..stop];
                let tag = el(seg, sep, 0);
                match tag.as_str() {
                    "ISA" => {
                        ic.isa = seg.to_vec();
                        ic.sender = format!("{}:{}", el(seg, sep, 5), el(seg, sep, 6));
                        ic.receiver = format!("{}:{}", el(seg, sep, 7), el(seg, sep, 8));
                        ic.control = el(seg, sep, 13);
                    }
                    "GS" => ic.gs = seg.to_vec(),
                    "ST" => cur = Some(Tx { kind: el(seg, sep, 1), segments: vec![seg.to_vec()] }),
                    "SE" => {
                        if let Some(mut t) = cur.take() {
                            t.segments.push(seg.to_vec());
                            ic.txs.push(t);
                        }
                    }
                    "IEA" => {
                        if el(seg, sep, 2) != ic.control {
                            ic.error = Some(format!(
                                "IEA02 at segment 0 (byte {seg_start}): control number {} does not match ISA13 {}",
                                el(seg, sep, 2),
                                ic.control
                            ));
                        }
                        end = Some((stop + 1).min(input.len()));
                        break;
                    }
                    _ => {
                        if let Some(t) = cur.as_mut() {
                            t.segments.push(seg.to_vec());
                        }
                    }
                }
                i = stop + 1;
            }
            let e = match end {
                Some(e) => e,
                None => {
                    ic.error = Some(format!(
                        "IEA at segment 0 (byte {}): interchange not closed by IEA",
                        input.len()
                    ));
                    input.len()
                }
            };
            ic.span = start..e;
            out.push(ic);
            pos = e;
        }
        if out.is_empty() && error.is_none() {
            error = Some("E000 at segment 0 (byte 0): no interchange found".to_owned());
        }
        (out, error)
    }
}
