//! From queue counts to events: [`Detector::observe`] takes one snapshot of the queue's
//! groups (partner, metering id, held items and units, duplicates) and the time, sums them per
//! partner, and says which partners changed.
//!
//! Per partner, against the previous snapshot:
//! - `partner_held` when its held items rise from 0, `partner_released` when they fall back
//!   to 0 (a partner gone from the snapshot has 0 of everything);
//! - `duplicates_started` when its duplicate items grow and none grew for
//!   [`Rules::duplicates_quiet`] before (or ever, since the detector started);
//! - `backlog_exceeded` when its held units reach [`Rules::backlog_threshold`] from below.
//!
//! Invariants:
//! - **One event per episode.** Each event fires on a transition, never on a level: a partner
//!   held for an hour gives one `partner_held`, not one per snapshot.
//! - **Rate-limited.** An event of the same kind for the same partner within
//!   [`Rules::min_interval`] of the last one sent is suppressed ([`Observed::suppressed`]);
//!   the episode still counts as reported, so a partner flapping between held and not gives
//!   at most one `partner_held` per interval.
//! - **The first snapshot is the baseline.** It gives no event: after a restart, a partner
//!   already held was reported before it.
//! - **Pure.** No clock, no I/O: the caller passes the time, so tests step through hours of
//!   episodes without waiting.
//! - **Bounded.** A partner is forgotten once all its counts are 0 and its last duplicate
//!   growth is older than the quiet period; sent-times older than the interval are dropped.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use jiff::Timestamp;

use crate::event::{Event, EventKind};

/// When events fire and how often.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// Held units per partner at which `backlog_exceeded` fires (≥ 1).
    pub backlog_threshold: u64,
    /// The least time between two events of one kind for one partner.
    pub min_interval: Duration,
    /// How long a partner's duplicates must not have grown for the next growth to be
    /// `duplicates_started`.
    pub duplicates_quiet: Duration,
}

impl Default for Rules {
    fn default() -> Self {
        Self {
            backlog_threshold: 10_000,
            min_interval: Duration::from_secs(300),
            duplicates_quiet: Duration::from_secs(600),
        }
    }
}

/// One group of the queue: a partner's items metered against one id (one route).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group<'a> {
    /// The partner.
    pub partner: &'a str,
    /// The metering id, when the items were routed.
    pub metering_id: Option<&'a str>,
    /// Held items.
    pub held: u64,
    /// Held units.
    pub held_units: u64,
    /// Items quarantined as duplicates.
    pub duplicates: u64,
}

/// What one snapshot gave.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// Events to send.
    pub send: Vec<Event>,
    /// Events not sent: the same kind went out for the same partner less than
    /// [`Rules::min_interval`] ago.
    pub suppressed: Vec<Event>,
}

/// A partner's sums over its groups in one snapshot.
#[derive(Debug, Default)]
struct Totals {
    held: u64,
    held_units: u64,
    duplicates: u64,
    /// The metering id with the most held items (the first of equals), and how many.
    most_held: Option<(String, u64)>,
    /// The metering id with the most duplicates (the first of equals), and how many.
    most_duplicates: Option<(String, u64)>,
}

/// What the detector remembers of a partner between snapshots.
#[derive(Debug, Default)]
struct Partner {
    held: u64,
    duplicates: u64,
    /// Held units were at or above the threshold.
    over: bool,
    /// When its duplicates last grew (ms since the epoch).
    duplicates_grew: Option<i64>,
    /// The metering id most held while held (for `partner_released`).
    held_id: Option<String>,
}

/// The state machine; see the module docs.
#[derive(Debug)]
pub struct Detector {
    rules: Rules,
    partners: HashMap<String, Partner>,
    /// When each (partner, event) was last sent, ms since the epoch.
    sent: HashMap<(String, EventKind), i64>,
    started: bool,
}

impl Detector {
    /// A detector with `rules`, waiting for its baseline snapshot.
    pub fn new(rules: Rules) -> Self {
        Self { rules, partners: HashMap::new(), sent: HashMap::new(), started: false }
    }

    /// Takes the snapshot `groups`, seen at `now`, and returns the events it gives.
    pub fn observe<'a>(
        &mut self,
        groups: impl IntoIterator<Item = Group<'a>>,
        now: Timestamp,
    ) -> Observed {
        let totals = sum(groups);
        let now_ms = now.as_millisecond();
        let mut out = Observed::default();
        if !std::mem::replace(&mut self.started, true) {
            for (name, t) in totals {
                let p = Partner {
                    held: t.held,
                    duplicates: t.duplicates,
                    over: t.held_units >= self.rules.backlog_threshold,
                    duplicates_grew: None,
                    held_id: t.most_held.map(|(id, _)| id),
                };
                self.partners.insert(name, p);
            }
            return out;
        }
        let quiet = millis(self.rules.duplicates_quiet);
        let names: BTreeSet<String> =
            self.partners.keys().cloned().chain(totals.keys().cloned()).collect();
        let empty = Totals::default();
        for name in names {
            let t = totals.get(&name).unwrap_or(&empty);
            let p = self.partners.entry(name.clone()).or_default();
            let event = |kind: EventKind, metering_id: Option<String>| Event {
                event: kind,
                partner: Some(name.clone()),
                metering_id,
                at: now,
                held: t.held,
                held_units: t.held_units,
                duplicates: t.duplicates,
            };
            let mut found = Vec::new();
            let most_held = t.most_held.as_ref().map(|(id, _)| id.clone());
            if p.held == 0 && t.held > 0 {
                found.push(event(EventKind::PartnerHeld, most_held.clone()));
            } else if p.held > 0 && t.held == 0 {
                found.push(event(EventKind::PartnerReleased, p.held_id.clone()));
            }
            if t.duplicates > p.duplicates {
                if p.duplicates_grew.is_none_or(|at| now_ms.saturating_sub(at) >= quiet) {
                    let id = t.most_duplicates.as_ref().map(|(id, _)| id.clone());
                    found.push(event(EventKind::DuplicatesStarted, id));
                }
                p.duplicates_grew = Some(now_ms);
            }
            let over = t.held_units >= self.rules.backlog_threshold;
            if over && !p.over {
                found.push(event(EventKind::BacklogExceeded, most_held.clone()));
            }
            p.held = t.held;
            p.duplicates = t.duplicates;
            p.over = over;
            if t.held > 0 {
                p.held_id = most_held;
            }
            let idle = t.held == 0
                && t.duplicates == 0
                && !over
                && p.duplicates_grew.is_none_or(|at| now_ms.saturating_sub(at) >= quiet);
            if idle {
                self.partners.remove(&name);
            }
            for e in found {
                if self.allow(&name, e.event, now_ms) {
                    out.send.push(e);
                } else {
                    out.suppressed.push(e);
                }
            }
        }
        let interval = millis(self.rules.min_interval);
        self.sent.retain(|_, at| now_ms.saturating_sub(*at) < interval);
        out
    }

    /// Whether an event `kind` for `partner` may be sent at `now_ms`; if so, it counts as sent.
    fn allow(&mut self, partner: &str, kind: EventKind, now_ms: i64) -> bool {
        let interval = millis(self.rules.min_interval);
        let key = (partner.to_owned(), kind);
        if self.sent.get(&key).is_some_and(|at| now_ms.saturating_sub(*at) < interval) {
            return false;
        }
        self.sent.insert(key, now_ms);
        true
    }
}

/// Each partner's totals over its groups, by name.
fn sum<'a>(groups: impl IntoIterator<Item = Group<'a>>) -> BTreeMap<String, Totals> {
    let mut totals: BTreeMap<String, Totals> = BTreeMap::new();
    for g in groups {
        let t = totals.entry(g.partner.to_owned()).or_default();
        t.held = t.held.saturating_add(g.held);
        t.held_units = t.held_units.saturating_add(g.held_units);
        t.duplicates = t.duplicates.saturating_add(g.duplicates);
        if let Some(id) = g.metering_id {
            if g.held > 0 && t.most_held.as_ref().is_none_or(|(_, n)| g.held > *n) {
                t.most_held = Some((id.to_owned(), g.held));
            }
            if g.duplicates > 0 && t.most_duplicates.as_ref().is_none_or(|(_, n)| g.duplicates > *n)
            {
                t.most_duplicates = Some((id.to_owned(), g.duplicates));
            }
        }
    }
    totals
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
