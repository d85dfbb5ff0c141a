//! Receipt: one received file sorted into queue items, with dedup and routing decided.
//!
//! Invariant: **every byte of a received file is accounted for.** Each interchange the parser
//! finds becomes an item (routed, duplicate or rejected with the parser's reason), and each run
//! of bytes outside every interchange (garbage before, between or after them, or the cut-off
//! tail of a truncated interchange the parser did not take) becomes a `rejected` item of its
//! own, whose reason names the byte range and the parser's file-level error. Its bytes stay in
//! the spool, so an operator can read them. Only ASCII whitespace and a leading UTF-8 byte
//! order mark between interchanges are formatting and need no item.

use std::collections::HashSet;
use std::ops::Range;

use crate::config::Route;
use crate::envelope::{self, Envelope};
use crate::item::{Item, State, now_ms};
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

/// The weight an interchange is charged on `route`: what its rule counts, but at least the
/// route's `min_weight`, so an interchange the rule finds nothing in is still counted.
pub(crate) fn charge(interchange: &[u8], route: &Route) -> u64 {
    envelope::weight(interchange, &route.weight).max(route.min_weight)
}

/// Reads, parses and sorts one received file into items (blocking: runs off the runtime).
pub(crate) fn prepare(
    parts: &Parts,
    file: FileRecord,
    seen: &mut HashSet<String>,
) -> (FileRecord, Vec<Item>, Vec<(String, i64)>) {
    let plan = &parts.plan;
    let bytes = match parts.spool.read(&file.spool, file.start, file.end) {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(file = %file.id, error = %e, "spooled file unreadable");
            let item =
                rejected_item(&file, file.id.clone(), 0..0, format!("spool file unreadable: {e}"));
            return (file, vec![item], Vec::new());
        }
    };
    let scan = envelope::scan(&bytes);
    if scan.envelopes.is_empty() {
        let reason = scan.error.unwrap_or_else(|| "no interchange found".to_owned());
        let all = 0..bytes.len();
        let item = rejected_item(&file, file.id.clone(), all, format!("not EDI: {reason}"));
        return (file, vec![item], Vec::new());
    }
    let spans: Vec<Range<usize>> = scan.envelopes.iter().map(|e| e.span.clone()).collect();
    let mut pieces: Vec<Piece<'_>> = scan.envelopes.iter().map(Piece::Interchange).collect();
    pieces.extend(stray_runs(&bytes, &spans).into_iter().map(Piece::Stray));
    pieces.sort_by_key(Piece::start);

    let since = now_ms() - i64::try_from(plan.dedup.as_millis()).unwrap_or(i64::MAX / 2);
    let single = pieces.len() == 1;
    let mut items = Vec::new();
    let mut dedup = Vec::new();
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
        let slice = bytes.get(env.span.clone()).unwrap_or_default();
        let weight = route.map_or(0, |r| charge(slice, r));
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
        };
        let key = format!("{}|{}|{}", env.sender, env.receiver, env.control_number);
        if let Some(err) = &env.error {
            item.state = State::Rejected;
            item.reason = Some(err.clone());
            write_ack(parts, &item, slice);
        } else if seen.contains(&key)
            || parts.spool.seen_since(&key, since).ok().flatten().is_some()
        {
            item.state = State::Duplicate;
            item.reason = Some(format!(
                "duplicate of interchange {} from {} to {} received within {} days",
                env.control_number,
                env.sender,
                env.receiver,
                plan.dedup.as_secs() / 86_400
            ));
        } else if route.is_none() {
            let doc = if env.document.is_empty() { "(none)" } else { env.document.as_str() };
            item.state = State::Rejected;
            item.reason = Some(format!("no route for document {doc}"));
        } else {
            seen.insert(key.clone());
            dedup.push((key, file.received_at));
        }
        if item.state.is_terminal() {
            tracing::info!(item = %item.id, state = %item.state, reason = item.reason.as_deref().unwrap_or(""), "not delivered");
        }
        items.push(item);
    }
    (file, items, dedup)
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
    }
}

/// Writes the parser's acknowledgement of a rejected interchange into the acks directory.
fn write_ack(parts: &Parts, item: &Item, interchange: &[u8]) {
    let Some(dir) = &parts.plan.acks else { return };
    let Ok(control) = parts.spool.next_control_number() else { return };
    let Some(ack) = envelope::acknowledge(interchange, control) else { return };
    let res = std::fs::create_dir_all(dir).and_then(|()| {
        let tmp = dir.join(format!(".{}.ack.tmp", item.id));
        std::fs::write(&tmp, &ack)?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, dir.join(format!("{}.ack", item.id)))
    });
    if let Err(e) = res {
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
