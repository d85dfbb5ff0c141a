//! Receipt: one received file sorted into queue items, with dedup and routing decided.
//!
//! Invariant: **every byte of a received file is accounted for.** Each interchange the parser
//! finds becomes an item (routed, duplicate or rejected with the parser's reason), and each run
//! of bytes outside every interchange (garbage before, between or after them, or the cut-off
//! tail of a truncated interchange the parser did not take) becomes a `rejected` item of its
//! own, whose reason names the byte range and the parser's file-level error. Its bytes stay in
//! the spool, so an operator can read them. Only ASCII whitespace and a leading UTF-8 byte
//! order mark between interchanges are formatting and need no item.
//!
//! [`parse`] is the gateway's one parse of a file; [`prepare`] sorts a parsed file into items.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use crate::config::{Plan, Route, UnknownSenders};
use crate::envelope::{self, Envelope, Scan};
use crate::item::{Item, State};
use crate::pipeline::Parts;
use crate::spool::FileRecord;

/// One piece of a received file: an interchange, or a run of bytes outside every interchange.
enum Piece<'a> {
    Interchange(&'a Envelope),
    Stray(Range<usize>),
}

impl Piece<'_> {
    fn start(&self) -> usize {
        match self {
            Piece::Interchange(e) => e.span.start,
            Piece::Stray(r) => r.start,
        }
    }
}

/// Bytes that only format a file: whitespace between interchanges and a byte order mark.
fn is_formatting(bytes: &[u8], at_start: bool) -> bool {
    let bytes = if at_start { bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes) } else { bytes };
    bytes.iter().all(|b| b.is_ascii_whitespace())
}

/// The runs of `len` bytes no span covers and that are more than formatting, in order.
fn stray_runs(bytes: &[u8], spans: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut sorted: Vec<Range<usize>> = spans.to_vec();
    sorted.sort_by_key(|r| r.start);
    let mut out = Vec::new();
    let mut at = 0;
    for span in sorted.iter().chain(std::iter::once(&(bytes.len()..bytes.len()))) {
        if span.start > at {
            let gap = at..span.start.min(bytes.len());
            if bytes.get(gap.clone()).is_some_and(|g| !is_formatting(g, gap.start == 0)) {
                out.push(trim(bytes, gap));
            }
        }
        at = at.max(span.end);
    }
    out
}

/// `run` without the whitespace around it (it holds more than whitespace).
fn trim(bytes: &[u8], mut run: Range<usize>) -> Range<usize> {
    while run.start < run.end && bytes[run.start].is_ascii_whitespace() {
        run.start += 1;
    }
    while run.end > run.start && bytes[run.end - 1].is_ascii_whitespace() {
        run.end -= 1;
    }
    run
}

/// A received file, parsed: its interchanges (each weighed under its route's rule, with the
/// layout of those on split routes) and the runs of bytes outside every interchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// The interchanges, from the one parse of the file.
    pub scan: Scan,
    /// Runs of bytes outside every interchange that are more than formatting, in order.
    pub strays: Vec<Range<usize>>,
    /// The file's length.
    pub len: usize,
}

/// Parses a received file once, weighing each interchange under the rule of the route its
/// document takes (blocking: runs off the runtime). Everything the gateway later needs from
/// the parser (weights, split layouts, acknowledgements) is kept in the result.
pub fn parse(bytes: &[u8], plan: &Plan) -> Parsed {
    let scan = envelope::scan(bytes, |document| plan.route_for(document).map(Route::weighing));
    let strays = if scan.envelopes.is_empty() {
        Vec::new()
    } else {
        let spans: Vec<Range<usize>> = scan.envelopes.iter().map(|e| e.span.clone()).collect();
        stray_runs(bytes, &spans)
    };
    Parsed { scan, strays, len: bytes.len() }
}

/// A received file sorted into items, and the dedup keys of its accepted interchanges.
pub(crate) type Prepared = (FileRecord, Vec<Item>, Vec<(String, i64)>);

/// Parses one received file (unless its receiver did) and sorts it into items: rejected,
/// duplicate (of an earlier file, of a key in `seen`, or of an interchange earlier in this
/// file) or routed (blocking: runs off the runtime). `seen` holds the keys accepted earlier in
/// the same batch; this file's own keys are returned, not added.
pub fn prepare(parts: &Parts, mut file: FileRecord, seen: &HashSet<String>) -> Prepared {
    let plan = &parts.plan;
    let mut bytes = None;
    let parsed = match file.parsed.take() {
        Some(parsed) => parsed,
        None => match parts.spool.read(&file.spool, file.start, file.end) {
            Ok(b) => {
                let parsed = Arc::new(parse(&b, plan));
                bytes = Some(b);
                parsed
            }
            Err(e) => {
                tracing::error!(file = %file.id, error = %e, "spooled file unreadable");
                let reason = format!("spool file unreadable: {e}");
                let item = rejected_item(&file, file.id.clone(), 0..0, reason);
                return (file, vec![item], Vec::new());
            }
        },
    };
    let scan = &parsed.scan;
    if scan.envelopes.is_empty() {
        let reason = scan.error.clone().unwrap_or_else(|| "no interchange found".to_owned());
        let all = 0..parsed.len;
        let item = rejected_item(&file, file.id.clone(), all, format!("not EDI: {reason}"));
        return (file, vec![item], Vec::new());
    }
    let mut pieces: Vec<Piece<'_>> = scan.envelopes.iter().map(Piece::Interchange).collect();
    pieces.extend(parsed.strays.iter().cloned().map(Piece::Stray));
    pieces.sort_by_key(Piece::start);

    let now = parts.spool.now_ms();
    let single = pieces.len() == 1;
    let mut items = Vec::new();
    let mut dedup = Vec::new();
    let mut mine = HashSet::new();
    for (n, piece) in pieces.iter().enumerate() {
        let id = if single { file.id.clone() } else { format!("{}-{}", file.id, n + 1) };
        let env = match piece {
            Piece::Interchange(env) => env,
            Piece::Stray(run) => {
                let why = scan
                    .file_errors_in(run)
                    .unwrap_or_else(|| "not part of any interchange".into());
                let reason = format!(
                    "bytes {}..{} of the file are outside every interchange: {why}",
                    run.start, run.end
                );
                let item = rejected_item(&file, id, run.clone(), reason);
                tracing::info!(item = %item.id, reason = item.reason.as_deref().unwrap_or(""), "not delivered");
                items.push(item);
                continue;
            }
        };
        let partner = plan.partner_name(&env.sender);
        let route = plan.route_for(&env.document);
        // What the rule counts, but at least the route's `min_weight`, so an interchange the
        // rule finds nothing in is still counted.
        let weight = route.map_or(0, |r| env.records.max(r.min_weight));
        let mut item = Item {
            id,
            state: State::Received,
            spool_file: file.spool.clone(),
            start: file.start + env.span.start as u64,
            end: file.start + env.span.end as u64,
            partner: partner.clone(),
            sender: env.sender.clone(),
            receiver: env.receiver.clone(),
            control_number: env.control_number.clone(),
            document: env.document.clone(),
            route: route.map(|r| r.name.clone()),
            metering_id: route.map(|r| r.metering_id(&partner)),
            weight,
            received_at: file.received_at,
            next_attempt_at: None,
            attempts: 0,
            reason: None,
            layout: None,
            held_at: None,
            delivered_at: None,
            duplicate_of: None,
            charge: None,
            part_charges: Vec::new(),
        };
        let key = format!("{}|{}|{}", env.sender, env.receiver, env.control_number);
        let window = route.map_or(plan.dedup, |r| r.dedup_window);
        let since = now - i64::try_from(window.as_millis()).unwrap_or(i64::MAX / 2);
        if let Some(err) = &env.error {
            item.state = State::Rejected;
            item.reason = Some(err.clone());
            if let Some(ic) = &env.rejected {
                write_ack(parts, &item, &file, &mut bytes, ic);
            }
        } else if plan.unknown_senders == UnknownSenders::Reject
            && !plan.partners.contains_key(&env.sender)
        {
            item.state = State::Rejected;
            item.metering_id = None;
            item.reason = Some(format!(
                "sender {} is in no [[gateway.partner]] ids (unknown_senders = \"reject\")",
                env.sender
            ));
        } else if let Some(owner) = plan.landing_owner(&file.origin)
            && owner != partner
        {
            item.state = State::Rejected;
            item.metering_id = None;
            item.reason = Some(format!(
                "sender {} dropped into a landing directory of partner {owner}, whose ids it is \
                 not among",
                env.sender
            ));
        } else if seen.contains(&key)
            || mine.contains(&key)
            || parts.spool.seen_since(&key, since).ok().flatten().is_some()
        {
            item.state = State::Duplicate;
            item.reason = Some(format!(
                "duplicate of interchange {} from {} to {} received within {} days",
                env.control_number,
                env.sender,
                env.receiver,
                window.as_secs() / 86_400
            ));
        } else if route.is_none() {
            let doc = if env.document.is_empty() { "(none)" } else { env.document.as_str() };
            item.state = State::Rejected;
            item.reason = Some(format!("no route for document {doc}"));
        } else {
            item.layout = env.layout.clone();
            mine.insert(key.clone());
            dedup.push((key, file.received_at));
        }
        if item.state.is_terminal() {
            tracing::info!(item = %item.id, state = %item.state, reason = item.reason.as_deref().unwrap_or(""), "not delivered");
        }
        items.push(item);
    }
    (file, items, dedup)
}

/// The items of a file the parser failed on (it panicked): one rejected item for the whole
/// file, with the reason, so the file leaves intake and its bytes stay for an operator.
pub(crate) fn parser_failed(file: FileRecord, why: &str) -> Prepared {
    let reason = format!("the parser failed on this file: {why}");
    let item = rejected_item(&file, file.id.clone(), 0..0, reason);
    (file, vec![item], Vec::new())
}

/// A rejected item for `run` (file-relative bytes) of a received file.
fn rejected_item(file: &FileRecord, id: String, run: Range<usize>, reason: String) -> Item {
    let (start, end) = if run.is_empty() {
        (file.start, file.end)
    } else {
        (file.start + run.start as u64, file.start + run.end as u64)
    };
    Item {
        id,
        state: State::Rejected,
        spool_file: file.spool.clone(),
        start,
        end,
        partner: String::new(),
        sender: String::new(),
        receiver: String::new(),
        control_number: String::new(),
        document: String::new(),
        route: None,
        metering_id: None,
        weight: 0,
        received_at: file.received_at,
        next_attempt_at: None,
        attempts: 0,
        reason: Some(reason),
        layout: None,
        held_at: None,
        delivered_at: None,
        duplicate_of: None,
        charge: None,
        part_charges: Vec::new(),
    }
}

/// Writes the parser's acknowledgement of a rejected interchange into the acks directory. The
/// file's bytes are read from the spool if the caller does not hold them (an upload's parse).
fn write_ack(
    parts: &Parts,
    item: &Item,
    file: &FileRecord,
    bytes: &mut Option<Vec<u8>>,
    ic: &tollgate_edi::Interchange,
) {
    let Some(dir) = &parts.plan.acks else { return };
    if bytes.is_none() {
        match parts.spool.read(&file.spool, file.start, file.end) {
            Ok(b) => *bytes = Some(b),
            Err(e) => {
                tracing::error!(item = %item.id, error = %e, "no acknowledgement: spool file unreadable");
                return;
            }
        }
    }
    let Some(bytes) = bytes.as_deref() else { return };
    let Ok(control) = parts.spool.next_control_number() else { return };
    let Some(ack) = envelope::acknowledge(bytes, ic, control) else { return };
    let tmp = dir.join(format!(".{}.ack.tmp", item.id));
    let res = std::fs::create_dir_all(dir).and_then(|()| {
        std::fs::write(&tmp, &ack)?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, dir.join(format!("{}.ack", item.id)))
    });
    if let Err(e) = res {
        // A part written before the failure (a full disk) is not left behind.
        let _ = std::fs::remove_file(&tmp);
        tracing::error!(dir = %dir.display(), error = %e, "writing an acknowledgement failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // one span per file is the common case
    fn stray_runs_skip_formatting_and_find_garbage() {
        let b = b"\xEF\xBB\xBFAAAA\r\nBBBB junk CCCC  x";
        let spans = [3..7, 9..13, 19..23];
        assert_eq!(stray_runs(b, &spans), vec![14..18, 25..26]);
        assert!(stray_runs(b"  AAAA\n", &[2..6]).is_empty());
        assert_eq!(stray_runs(b"AAAAzz", &[0..4]), vec![4..6]);
    }
}
