//! One counter's state and the admission rule, for the counters kept under a lock (flexi and
//! rolling windows, and calendar counters whose figures do not fit a lock-free cell), and as the
//! form in which every counter is written to disk and read back.

use crate::decision::{Counted, Decision, GivenBack, Outcome};
use crate::metering_id::MeteringId;
use crate::spec::{CounterShape, QuotaSpec, WindowKind};
use crate::store::CounterInfo;
use crate::window::{self, RollingLayout};

/// The state of one counter. See the module invariants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Counter {
    /// Units admitted in the current calendar/flexi window (unused for rolling).
    pub(crate) used: u64,
    /// Rejections in the current window (flexi: or since the last window ended, while none is
    /// open; unused for rolling).
    pub(crate) exceed: u64,
    /// Rejections across the windows of this counter.
    pub(crate) total_exceed: u64,
    /// Calendar and rolling: the end (see [`Counter::end_us`]). Flexi: the start of the window
    /// while `used > 0`, else the time of the last rejection. `i64::MIN` when never checked.
    pub(crate) mark_us: i64,
    /// Rolling windows only: the non-empty sub-buckets, oldest first. Boxed so that calendar
    /// and flexi counters pay 8 bytes for it, not 24.
    #[allow(clippy::box_collection)]
    pub(crate) buckets: Option<Box<Vec<Bucket>>>,
}

/// One rolling sub-bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bucket {
    pub(crate) index: i64,
    pub(crate) used: u64,
    pub(crate) exceed: u64,
}

/// What a check decided, before it is dressed as a [`Decision`]. Times in Unix microseconds.
/// The Redis store fills one from its script's reply, so both answer through one conversion.
pub(crate) struct Tally {
    pub(crate) outcome: Outcome,
    pub(crate) used: u64,
    pub(crate) exceed: u64,
    pub(crate) total_exceed: u64,
    /// `(start, end)` of the window; `None` for rolling windows.
    pub(crate) window: Option<(i64, i64)>,
    /// When a request of this weight could be admitted; `Some` only for [`Outcome::Exceeded`].
    pub(crate) retry_at: Option<i64>,
    /// When the counter next frees units.
    pub(crate) reset_at: i64,
}

impl Tally {
    /// A calendar or flexi tally: the counter's figures after the check, in `(start, end)`.
    pub(super) fn windowed(outcome: Outcome, counter: &Counter, start: i64, end: i64) -> Self {
        Self {
            outcome,
            used: counter.used,
            exceed: counter.exceed,
            total_exceed: counter.total_exceed,
            window: Some((start, end)),
            retry_at: (outcome == Outcome::Exceeded).then_some(end),
            reset_at: end,
        }
    }

    /// The answer to a check of `weight` units against `spec`, decided at `now_us`. Inlined
    /// into each caller, so the tally is read from registers (see `Counters::check_us`).
    #[inline(always)]
    pub(crate) fn decision(self, spec: &QuotaSpec, weight: u64, now_us: i64) -> Decision {
        Decision {
            outcome: self.outcome,
            degraded: false,
            limit: spec.limit,
            used: self.used,
            weight,
            exceed_count: self.exceed,
            total_exceed_count: self.total_exceed,
            window_us: self.window,
            retry_at_us: self.retry_at,
            reset_at_us: self.reset_at,
            at_us: now_us,
        }
    }
}

impl Counter {
    /// True when nothing counted is left and the carried total (if any) has lapsed.
    pub(super) fn is_dead(&self, shape: &CounterShape, now_us: i64) -> bool {
        let end = self.end_us(shape);
        now_us >= end
            && (self.total_exceed == 0
                || now_us >= end.saturating_add(window::nominal_len_us(shape)))
    }

    /// The instant after which this counter holds nothing counted.
    pub(crate) fn end_us(&self, shape: &CounterShape) -> i64 {
        match shape.window {
            WindowKind::Flexi if self.used > 0 => window::add_len(shape, self.mark_us),
            _ => self.mark_us,
        }
    }

    /// Called at or after the end: zero what belonged to the dead window, and the carried total
    /// once it has lapsed.
    fn restart(&mut self, shape: &CounterShape, now_us: i64) {
        if now_us >= self.end_us(shape).saturating_add(window::nominal_len_us(shape)) {
            self.total_exceed = 0;
        }
        self.used = 0;
        self.exceed = 0;
    }

    pub(super) fn decide(
        &mut self,
        shape: &CounterShape,
        limit: u64,
        weight: u64,
        now_us: i64,
    ) -> Tally {
        match shape.window {
            WindowKind::Calendar => self.decide_calendar(shape, limit, weight, now_us),
            WindowKind::Flexi => self.decide_flexi(shape, limit, weight, now_us),
            WindowKind::Rolling => self.decide_rolling(shape, limit, weight, now_us),
        }
    }

    fn decide_calendar(
        &mut self,
        shape: &CounterShape,
        limit: u64,
        weight: u64,
        now_us: i64,
    ) -> Tally {
        let (start, end) = if now_us >= self.mark_us {
            self.restart(shape, now_us);
            let (start, end) = window::calendar_us(shape, now_us);
            self.mark_us = end;
            (start, end)
        } else {
            match window::fixed_len_us(shape) {
                Some(len) if self.mark_us < window::MAX_US => {
                    (self.mark_us.saturating_sub(len), self.mark_us)
                }
                _ => window::calendar_us(shape, now_us),
            }
        };
        let outcome = admit(self.used, limit, weight);
        match outcome {
            Outcome::Allowed => self.used += weight,
            _ => self.reject(),
        }
        Tally::windowed(outcome, self, start, end)
    }

    fn decide_flexi(
        &mut self,
        shape: &CounterShape,
        limit: u64,
        weight: u64,
        now_us: i64,
    ) -> Tally {
        let open_end = self.end_us(shape);
        let open = self.used > 0 && now_us < open_end;
        if !open {
            let lapsed = now_us >= open_end.saturating_add(window::nominal_len_us(shape));
            if self.used > 0 || lapsed {
                // The window has ended, or the rejections counted while none was open lapsed.
                self.exceed = 0;
            }
            if lapsed {
                self.total_exceed = 0;
            }
            self.used = 0;
        }
        let outcome = admit(self.used, limit, weight);
        let (start, end) =
            if open { (self.mark_us, open_end) } else { (now_us, window::add_len(shape, now_us)) };
        match outcome {
            Outcome::Allowed if weight > 0 => {
                if !open {
                    // The first admitted request opens the window.
                    self.exceed = 0;
                    self.mark_us = now_us;
                }
                self.used += weight;
            }
            Outcome::Allowed => {}
            _ => {
                self.reject();
                if !open {
                    // No window: remember when, so the carried total lapses in time.
                    self.mark_us = now_us;
                }
            }
        }
        Tally::windowed(outcome, self, start, end)
    }

    fn decide_rolling(
        &mut self,
        shape: &CounterShape,
        limit: u64,
        weight: u64,
        now_us: i64,
    ) -> Tally {
        let layout = RollingLayout::of(shape);
        if now_us >= self.mark_us {
            self.restart(shape, now_us);
        }
        let first = layout.first_counted(now_us);
        let buckets = self.buckets.get_or_insert_with(Default::default);
        let gone = buckets.iter().take_while(|b| b.index < first).count();
        buckets.drain(..gone);
        // One pass for both sums; the update below changes them by exactly its own amount.
        // Saturating, because a counter read back from disk may hold anything.
        let (mut used, mut exceed) = buckets
            .iter()
            .fold((0u64, 0u64), |(u, x), b| (u.saturating_add(b.used), x.saturating_add(b.exceed)));
        let outcome = admit(used, limit, weight);
        let current = layout.bucket_of(now_us);
        let bucket = match buckets.iter().rposition(|b| b.index <= current) {
            Some(i) if buckets[i].index == current => i,
            found => {
                let at = found.map_or(0, |i| i + 1);
                buckets.insert(at, Bucket { index: current, used: 0, exceed: 0 });
                at
            }
        };
        match outcome {
            // No overflow: admitted means `used + weight <= limit`, and the bucket is in `used`.
            Outcome::Allowed => {
                buckets[bucket].used += weight;
                used += weight;
            }
            _ => {
                buckets[bucket].exceed = buckets[bucket].exceed.saturating_add(1);
                exceed = exceed.saturating_add(1);
                self.total_exceed = self.total_exceed.saturating_add(1);
            }
        }
        if buckets[bucket].used == 0 && buckets[bucket].exceed == 0 {
            // Only a probe's new bucket: removing it changes neither sum.
            buckets.remove(bucket);
        }
        let retry_at = (outcome == Outcome::Exceeded).then(|| {
            // The first instant at which enough sub-buckets have left for this weight.
            let need = weight.max(1);
            let mut left = used;
            let mut at = now_us;
            for b in buckets.iter() {
                if left.saturating_add(need) <= limit {
                    break;
                }
                left = left.saturating_sub(b.used);
                at = layout.leaves_at(b.index);
            }
            at
        });
        let reset_at = buckets.first().map_or(now_us, |b| layout.leaves_at(b.index));
        self.mark_us = buckets.last().map_or(now_us, |b| layout.leaves_at(b.index));
        if buckets.is_empty() {
            self.buckets = None;
        }
        Tally {
            outcome,
            used,
            exceed,
            total_exceed: self.total_exceed,
            window: None,
            retry_at,
            reset_at,
        }
    }

    /// Gives back up to `units` counted at `counted`, if that window (or, rolling, that
    /// sub-bucket) is still the one counting at `now_us`; never below zero.
    pub(super) fn give_back(
        &mut self,
        shape: &CounterShape,
        counted: &Counted,
        units: u64,
        now_us: i64,
    ) -> GivenBack {
        match (shape.window, counted.window) {
            (WindowKind::Calendar, Some((_, end))) => {
                if self.mark_us != end || now_us >= end {
                    return GivenBack::WindowGone;
                }
            }
            (WindowKind::Flexi, Some((start, end))) => {
                let open = self.used > 0 && self.mark_us == start && now_us < self.end_us(shape);
                if !open || window::add_len(shape, start) != end {
                    return GivenBack::WindowGone;
                }
            }
            (WindowKind::Rolling, _) => {
                return self.give_back_rolling(shape, counted, units, now_us);
            }
            _ => return GivenBack::WindowGone,
        }
        let given = self.used.min(units);
        self.used -= given;
        GivenBack::Units(given)
    }

    fn give_back_rolling(
        &mut self,
        shape: &CounterShape,
        counted: &Counted,
        units: u64,
        now_us: i64,
    ) -> GivenBack {
        let layout = RollingLayout::of(shape);
        let index = layout.bucket_of(counted.at_us);
        if index < layout.first_counted(now_us) {
            return GivenBack::WindowGone;
        }
        let Some(buckets) = self.buckets.as_mut() else { return GivenBack::WindowGone };
        let Some(at) = buckets.iter().position(|b| b.index == index) else {
            return GivenBack::WindowGone;
        };
        let given = buckets[at].used.min(units);
        buckets[at].used -= given;
        if buckets[at].used == 0 && buckets[at].exceed == 0 {
            buckets.remove(at);
        }
        // The end moves to the newest bucket left, as after a check.
        self.mark_us = buckets.last().map_or(now_us, |b| layout.leaves_at(b.index));
        if buckets.is_empty() {
            self.buckets = None;
        }
        GivenBack::Units(given)
    }

    fn reject(&mut self) {
        self.exceed = self.exceed.saturating_add(1);
        self.total_exceed = self.total_exceed.saturating_add(1);
    }

    /// The counter as the admin API lists it, or `None` when it holds nothing at `now_us`.
    pub(super) fn info(
        &self,
        id: &MeteringId,
        shape: &CounterShape,
        now_us: i64,
    ) -> Option<CounterInfo> {
        let (used, exceed, window) = match shape.window {
            WindowKind::Rolling => {
                let layout = RollingLayout::of(shape);
                let first = layout.first_counted(now_us);
                let live = self.buckets.iter().flat_map(|b| b.iter()).filter(|b| b.index >= first);
                let (used, exceed) = live.fold((0u64, 0u64), |(u, x), b| {
                    (u.saturating_add(b.used), x.saturating_add(b.exceed))
                });
                (used, exceed, None)
            }
            WindowKind::Calendar => {
                let w = window::calendar_us(shape, self.mark_us.saturating_sub(1));
                (self.used, self.exceed, Some(w))
            }
            WindowKind::Flexi => {
                if self.used == 0 {
                    return None;
                }
                (self.used, self.exceed, Some((self.mark_us, window::add_len(shape, self.mark_us))))
            }
        };
        Some(CounterInfo::new(id.clone(), shape, used, exceed, self.total_exceed, window))
    }
}

/// The admission rule: `used + weight <= limit`; weight 0 probes; weight over the limit never.
pub(super) fn admit(used: u64, limit: u64, weight: u64) -> Outcome {
    if weight > limit {
        Outcome::WeightExceedsLimit
    } else if weight == 0 {
        if used < limit { Outcome::Allowed } else { Outcome::Exceeded }
    } else if weight <= limit - used.min(limit) {
        Outcome::Allowed
    } else {
        Outcome::Exceeded
    }
}
