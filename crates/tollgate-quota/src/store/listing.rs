//! Listing live counters a page at a time: the order, the cursor and the bounded selection
//! every store shares, so a listing holds at most one page, whatever the number of counters.
//!
//! # Invariants
//!
//! * **One order:** by identifier (bytes), then shape (interval, unit, window, anchor); a
//!   position names at most one counter in every store.
//! * **A page never splits a position:** the next page starts strictly after the last position
//!   on this one, so paging with [`CounterPage::next`] lists every counter live throughout
//!   exactly once.

use std::fmt;
use std::str::FromStr;

use super::CounterInfo;
use crate::metering_id::MeteringId;
use crate::spec::{CounterShape, TimeUnit, WindowKind};

/// Where a counter sits in a listing (see the module's order).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CounterPosition {
    /// Whose counter it is.
    pub identifier: MeteringId,
    /// Its window's shape.
    pub shape: CounterShape,
}

/// `interval.unit.window.anchor.identifier`, the anchor in Unix seconds or `-`; the identifier
/// comes last, so it may hold dots.
impl fmt::Display for CounterPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shape;
        write!(f, "{}.{}.{}.", s.interval, s.unit.as_str(), s.window.as_str())?;
        match s.start {
            Some(start) => write!(f, "{start}.")?,
            None => f.write_str("-.")?,
        }
        f.write_str(self.identifier.as_str())
    }
}

/// A listing cursor that does not parse; the message names the part and the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a counter position ({0}); pass back a listing's `next` as it was given")]
pub struct PositionError(String);

impl FromStr for CounterPosition {
    type Err = PositionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts = s.splitn(5, '.');
        let mut part = |name: &str| {
            parts.next().ok_or_else(|| PositionError(format!("{name} missing in {s:?}")))
        };
        let (interval, unit, window, start, id) = (
            part("interval")?,
            part("unit")?,
            part("window")?,
            part("anchor")?,
            part("identifier")?,
        );
        let bad = |name: &str, v: &str| PositionError(format!("{name} {v:?} in {s:?}"));
        let shape = CounterShape {
            interval: interval.parse().map_err(|_| bad("interval", interval))?,
            unit: TimeUnit::from_str(unit).map_err(|_| bad("unit", unit))?,
            window: WindowKind::from_str(window).map_err(|_| bad("window", window))?,
            start: match start {
                "-" => None,
                v => Some(v.parse().map_err(|_| bad("anchor", v))?),
            },
        };
        let identifier = MeteringId::new(id).map_err(|_| bad("identifier", id))?;
        Ok(Self { identifier, shape })
    }
}

/// Which live counters to list: identifiers starting with `prefix`, strictly after `after`,
/// at most `limit` of them.
#[derive(Debug, Clone)]
pub struct CounterListing<'a> {
    /// Identifier prefix; empty for all.
    pub prefix: &'a str,
    /// The previous page's [`CounterPage::next`].
    pub after: Option<CounterPosition>,
    /// Most counters on the page.
    pub limit: usize,
}

impl<'a> CounterListing<'a> {
    /// Every live counter under `prefix`, in one page (for callers inside the process that
    /// need them all; an outsider's listing is paged).
    pub fn all(prefix: &'a str) -> Self {
        Self { prefix, after: None, limit: usize::MAX }
    }

    /// Whether the id of bytes `id` and `shape` belong on this listing, page aside.
    fn admits(&self, id: &[u8], shape: &CounterShape) -> bool {
        id.starts_with(self.prefix.as_bytes())
            && self.after.as_ref().is_none_or(|a| (id, shape) > (a.identifier.as_bytes(), &a.shape))
    }
}

/// One page of a listing.
#[derive(Debug, Clone, Default)]
pub struct CounterPage {
    /// The counters, in listing order.
    pub counters: Vec<CounterInfo>,
    /// Where the next page starts (pass it as [`CounterListing::after`]); `None` when this
    /// page is the last.
    pub next: Option<CounterPosition>,
}

/// The first `limit` positions a listing admits, each with what the store found there. Offers
/// are kept in a vector; once it holds a quarter more than the page (and at least 64), it is
/// sorted and cut to the first `limit + 1` positions (the last one only tells that more
/// follow), and later offers after that position are turned away. So it holds about
/// `1.25 × (limit + 1)` offers at most however many are made (more when positions hold several
/// values each, as a Redis calendar counter's keys do), with no allocation per offer beyond
/// the position itself: against a sorted map, a page of 100,000 of 200,000 counters took 102
/// instead of 145 ms (`benches/listing.rs`).
pub(crate) struct Selection<'l, V> {
    listing: &'l CounterListing<'l>,
    /// The offers kept, in the order they came since the last cut.
    kept: Vec<(CounterPosition, V)>,
    /// After a cut that dropped positions: the last position kept. An offer after it can be
    /// neither on the page nor begin the next one.
    bound: Option<CounterPosition>,
    /// How many kept offers make the next cut: a quarter more than the page (at least 64), or
    /// a quarter more than a cut left when positions hold many values each, so a cut that
    /// drops little is not made again at once.
    cut_at: usize,
}

impl<'l, V> Selection<'l, V> {
    pub(crate) fn new(listing: &'l CounterListing<'l>) -> Self {
        Self { listing, kept: Vec::new(), bound: None, cut_at: 0 }
    }

    /// Whether a value at `id` and `shape` would be kept: cheap, so a store builds values
    /// only for positions that may be listed.
    pub(crate) fn wants(&self, id: &MeteringId, shape: &CounterShape) -> bool {
        self.wants_bytes(id.as_bytes(), shape)
    }

    /// [`Selection::wants`] for an id's bytes, before a store makes a [`MeteringId`] of them:
    /// most counters of a large store are turned away here (ids are ordered by their bytes).
    pub(crate) fn wants_bytes(&self, id: &[u8], shape: &CounterShape) -> bool {
        self.listing.admits(id, shape)
            && self
                .bound
                .as_ref()
                .is_none_or(|b| (id, shape) <= (b.identifier.as_bytes(), &b.shape))
    }

    /// Keeps `value` at `id` and `shape` when [`Selection::wants`] it.
    pub(crate) fn add(&mut self, id: &MeteringId, shape: &CounterShape, value: V) {
        if !self.wants(id, shape) {
            return;
        }
        let position = CounterPosition { identifier: id.clone(), shape: *shape };
        self.kept.push((position, value));
        let page = self.listing.limit.saturating_add(1);
        if self.kept.len() >= self.cut_at.max(page.saturating_add(page / 4)).max(64) {
            self.cut(page);
            self.cut_at = self.kept.len().saturating_add(self.kept.len() / 4);
        }
    }

    /// Sorts the kept offers (a position's values keep their order) and keeps those of the
    /// first `positions` positions; whether any position was dropped.
    fn cut(&mut self, positions: usize) -> bool {
        self.kept.sort_by(|a, b| a.0.cmp(&b.0));
        let mut seen = 0;
        let end = (0..self.kept.len())
            .find(|&i| {
                let new = i == 0 || self.kept[i].0 != self.kept[i - 1].0;
                seen += usize::from(new);
                seen > positions
            })
            .unwrap_or(self.kept.len());
        let dropped = end < self.kept.len();
        self.kept.truncate(end);
        if dropped {
            self.bound = self.kept.last().map(|(p, _)| p.clone());
        }
        dropped
    }

    /// The kept offers in listing order (a position's values side by side), and the next
    /// page's start when more positions were offered than fit.
    fn finish_in_order(mut self) -> (Vec<(CounterPosition, V)>, Option<CounterPosition>) {
        let more = self.cut(self.listing.limit);
        let next = more.then(|| self.kept.last().map(|(p, _)| p.clone())).flatten();
        (self.kept, next)
    }

    /// The kept positions in order, each with its values, and the next page's start when
    /// more were offered than fit.
    pub(crate) fn finish(self) -> (Vec<(CounterPosition, Vec<V>)>, Option<CounterPosition>) {
        let (kept, next) = self.finish_in_order();
        let mut out: Vec<(CounterPosition, Vec<V>)> = Vec::new();
        for (position, value) in kept {
            match out.last_mut() {
                Some((last, values)) if *last == position => values.push(value),
                _ => out.push((position, vec![value])),
            }
        }
        (out, next)
    }
}

impl Selection<'_, CounterInfo> {
    /// The page of the kept counters.
    pub(crate) fn page(self) -> CounterPage {
        let (kept, next) = self.finish_in_order();
        CounterPage { counters: kept.into_iter().map(|(_, v)| v).collect(), next }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn shape(interval: u32) -> CounterShape {
        CounterShape { interval, unit: TimeUnit::Day, window: WindowKind::Calendar, start: None }
    }

    #[test]
    fn a_position_reads_back_from_its_text_dots_in_the_identifier_included() {
        let p = CounterPosition {
            identifier: MeteringId::new("Invoice:ACME.DE/v1").unwrap(),
            shape: CounterShape { start: Some(-86_400), ..shape(7) },
        };
        assert_eq!(p.to_string(), "7.day.calendar.-86400.Invoice:ACME.DE/v1");
        assert_eq!(p.to_string().parse::<CounterPosition>(), Ok(p));
        let q = CounterPosition { identifier: MeteringId::new("a").unwrap(), shape: shape(1) };
        assert_eq!("1.day.calendar.-.a".parse::<CounterPosition>(), Ok(q));
    }

    #[test]
    fn a_cursor_that_does_not_parse_names_the_part_and_the_value() {
        for (text, part) in [
            ("x.day.calendar.-.a", "interval \"x\""),
            ("1.fortnight.calendar.-.a", "unit \"fortnight\""),
            ("1.day.sliding.-.a", "window \"sliding\""),
            ("1.day.calendar.soon.a", "anchor \"soon\""),
            ("1.day.calendar.-.", "identifier \"\""),
            ("1.day", "window missing"),
        ] {
            let e = text.parse::<CounterPosition>().unwrap_err().to_string();
            assert!(e.contains(part), "{text}: {e}");
        }
    }

    proptest! {
        /// Paging through any offers, in any order, with any page size, lists every admitted
        /// position once, in order, with every value offered at it (enough offers that the
        /// selection cuts as it goes).
        #[test]
        fn pages_list_every_position_once_in_order(
            offers in prop::collection::vec((0u8..6, 1u32..4), 0..200),
            limit in 1usize..8,
            prefix in prop::sample::select(vec!["", "a", "b", "c"]),
        ) {
            let offers: Vec<(MeteringId, CounterShape)> = offers
                .into_iter()
                .map(|(i, n)| {
                    let id = ["a", "ab", "b", "ba", "c", "a.b"][i as usize];
                    (MeteringId::new(id).unwrap(), shape(n))
                })
                .collect();
            let mut want: Vec<_> = offers
                .iter()
                .filter(|(id, _)| id.as_str().starts_with(prefix))
                .cloned()
                .collect();
            want.sort();
            want.dedup();
            let mut listing = CounterListing { prefix, after: None, limit };
            let mut got = Vec::new();
            for _ in 0..=offers.len() {
                let mut sel = Selection::new(&listing);
                for (i, (id, s)) in offers.iter().enumerate() {
                    sel.add(id, s, i);
                }
                let (kept, next) = sel.finish();
                prop_assert!(kept.len() <= limit);
                for (p, values) in &kept {
                    // Every offer of the position, in the order offered.
                    let offered: Vec<usize> = (0..offers.len())
                        .filter(|&i| offers[i] == (p.identifier.clone(), p.shape))
                        .collect();
                    prop_assert_eq!(values, &offered);
                }
                got.extend(kept.into_iter().map(|(p, _)| (p.identifier, p.shape)));
                let Some(next) = next else { break };
                listing.after = Some(CounterPosition::from_str(&next.to_string()).unwrap());
            }
            prop_assert_eq!(got, want);
        }
    }
}
