//! Metering an item: waiting behind held items of the same metering id, asking the meter,
//! and admitting, holding, splitting or dead-lettering on its verdict. Splitting admits the
//! transactions that fit, in order, and never charges less than the route's `min_weight`.

use super::duplicates::Copies;
use super::*;
use crate::config::Dedup;

impl Pipeline {
    /// When the first held item falls due for re-metering.
    pub(super) fn next_hold_due(&self) -> Option<Instant> {
        let now_ms = self.parts.spool.now_ms();
        let now = Instant::now();
        self.held.heads().filter_map(|(_, h)| self.head_due_at(h)).min().map(|at| {
            now + Duration::from_millis(u64::try_from(at.saturating_sub(now_ms)).unwrap_or(0))
        })
    }

    /// Re-meters the head of every group that is due; an admitted head lets the next one try.
    pub(super) async fn retry_held(&mut self, batch: &mut Batch) {
        let now = self.parts.spool.now_ms();
        let due: Vec<MeteringId> = self
            .held
            .heads()
            .filter(|(_, h)| self.head_due_at(h).is_none_or(|at| at <= now))
            .map(|(m, _)| m.clone())
            .collect();
        for m in due {
            // Bounded: each admitted head leaves the group; a held one ends the loop.
            let mut first = true;
            while let Some(head) = self.held.head(&m).map(str::to_owned) {
                if !self.wake(&m, &head).await {
                    if self.held.head(&m) == Some(head.as_str()) {
                        break;
                    }
                    continue;
                }
                // A head woken from rest keeps its own time; one that follows an admitted
                // head tries at once.
                let at = self.live.get(&head).and_then(|i| i.next_attempt_at);
                if first && at.is_some_and(|at| at > now) {
                    break;
                }
                first = false;
                if !self.meter(&head, batch).await {
                    // Still held (or dead): the rest of the group waits for the new time.
                    if self.held.head(&m) == Some(head.as_str()) {
                        break;
                    }
                }
                if batch.change.put.len() >= MAX_BATCH {
                    return;
                }
            }
        }
    }

    /// Meters a new (or resumed) item, unless its metering id has held items to wait behind.
    pub(super) async fn meter_new(&mut self, id: &str, batch: &mut Batch) {
        let Some(item) = self.live.get(id) else { return };
        let Some(m) = item.metering_id.clone() else { return };
        if let Some(head) = self.held.head(&m).map(str::to_owned) {
            self.wake(&m, &head).await;
        }
        if self.held.is_holding(&m) {
            let now = self.parts.spool.now_ms();
            // The head's time; now when it could not be read (this item then tries as soon as
            // it heads the group).
            let head_at =
                self.held.head(&m).and_then(|h| self.live.get(h)).and_then(|h| h.next_attempt_at);
            let head_at = Some(head_at.unwrap_or(now));
            if let Some(item) = self.live.get_mut(id) {
                self.parts.meter.held(item);
                item.state = State::Held;
                item.held_at.get_or_insert(now);
                item.next_attempt_at = head_at;
                item.reason = Some(format!("waiting behind earlier held interchanges of {m}"));
                telemetry::count(Counter::Held, item, &self.parts.plan);
                batch.put(item);
            }
            self.held.insert(&m, id);
            self.update_held_gauge(id, &m);
            return;
        }
        self.meter(id, batch).await;
    }

    /// Meters the item now (on a `dedup = "transaction"` route, once its resent transactions
    /// are removed) and moves it to admitted, held, dead or duplicate.
    /// Returns true when the item (or a part of it) was admitted.
    pub(super) async fn meter(&mut self, id: &str, batch: &mut Batch) -> bool {
        let Some((route, mid)) = self.live.get(id).and_then(|i| self.route_of(i)) else {
            return false;
        };
        let mut claimed = Vec::new();
        if route.dedup == Dedup::Transaction {
            match self.remove_copies(id, &route, batch).await {
                Copies::Meter(keys) => claimed = keys,
                Copies::Stop(keys) => {
                    self.settle_claims(id, keys).await;
                    return false;
                }
            }
        }
        let admitted = self.meter_whole(id, &route, &mid, batch).await;
        self.settle_claims(id, claimed).await;
        admitted
    }

    /// Holds an item whose split could not be written; returns false (nothing admitted).
    pub(super) fn hold_after_split_failure(
        &mut self,
        id: &str,
        e: String,
        batch: &mut Batch,
    ) -> bool {
        tracing::error!(item = id, error = %e, "split failed; holding");
        self.hold(id, UNAVAILABLE_RETRY, format!("split failed: {e}"), batch);
        false
    }

    /// Asks the meter for the whole item and acts on the verdict.
    async fn meter_whole(
        &mut self,
        id: &str,
        route: &Route,
        mid: &MeteringId,
        batch: &mut Batch,
    ) -> bool {
        let Some(item) = self.live.get(id).cloned() else { return false };
        let verdict = self.parts.meter.check(mid, &route.spec, item.weight).await;
        match verdict {
            Verdict::Admitted { charge } => {
                if let Some(i) = self.live.get_mut(id) {
                    i.charge = charge;
                }
                self.admit(id, None, batch);
                true
            }
            Verdict::Exceeded { retry_after, .. } if route.split => {
                self.split(*item, route, mid, Some(retry_after), batch).await
            }
            Verdict::TooHeavy { .. } if route.split => {
                self.split(*item, route, mid, None, batch).await
            }
            Verdict::Exceeded { retry_after, limit } => {
                let reason = format!(
                    "over quota: {mid} allows {limit} per {} {}; weight {}",
                    route.spec.interval, route.spec.unit, item.weight
                );
                self.hold(id, retry_after, reason, batch);
                false
            }
            Verdict::TooHeavy { limit } => {
                let reason = format!(
                    "weight {} exceeds the limit {limit} of {mid}: it can never be admitted whole \
                     (set split = true on route {} or raise the limit)",
                    item.weight, route.name
                );
                self.dead_letter(id, reason, batch);
                false
            }
            Verdict::Misconfigured { reason } => {
                self.hold(id, MISCONFIGURED_RETRY, format!("quota misconfigured: {reason}"), batch);
                false
            }
            Verdict::Unavailable { reason } => match self.parts.plan.on_unavailable {
                OnQuotaUnavailable::Deliver => {
                    if let Some(i) = self.live.get(id) {
                        telemetry::count(Counter::FailOpen, i, &self.parts.plan);
                    }
                    self.admit(id, Some(format!("delivered without metering: {reason}")), batch);
                    true
                }
                OnQuotaUnavailable::Hold => {
                    self.hold(id, UNAVAILABLE_RETRY, format!("quota unavailable: {reason}"), batch);
                    false
                }
            },
        }
    }

    /// Admits the transactions that fit, one by one in order; the rest stays held.
    /// `retry_after` is known when the whole interchange was over quota.
    pub(super) async fn split(
        &mut self,
        item: Item,
        route: &Route,
        mid: &MeteringId,
        retry_after: Option<Duration>,
        batch: &mut Batch,
    ) -> bool {
        // The bytes are read from the spool; the transactions' spans and weights come from
        // the parse of the file, kept in the item (items stored without it are parsed here).
        let parts = self.parts.clone();
        let (file, start, end) = (item.spool_file.clone(), item.start, item.end);
        let (layout, weighing) = (item.layout.clone(), route.weighing());
        let read = tokio::task::spawn_blocking(move || {
            parts.spool.read(&file, start, end).map(|b| {
                let layout = layout.or_else(|| envelope::layout_of(&b, weighing));
                (b, layout)
            })
        })
        .await;
        let (bytes, layout) = match read {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => return self.hold_after_split_failure(&item.id, e.to_string(), batch),
            Err(e) => return self.hold_after_split_failure(&item.id, e.to_string(), batch),
        };
        let mut weights = layout.as_ref().map(envelope::Layout::weights).unwrap_or_default();
        // The parts together cost what the whole does: a `min_weight` above what the rule
        // counts is charged with the first transaction, so splitting never makes it free.
        let counted: u64 = weights.iter().sum();
        if let Some(first) = weights.first_mut() {
            *first += item.weight.saturating_sub(counted);
        }
        let mut keep = Vec::new();
        // Where the kept transactions were counted: given back if the split cannot be written.
        let mut charges = Vec::new();
        let mut wait = retry_after;
        for (i, w) in weights.iter().enumerate() {
            match self.parts.meter.check(mid, &route.spec, *w).await {
                Verdict::Admitted { charge } => {
                    keep.push(i);
                    charges.extend(charge.map(|c| (c, *w)));
                }
                Verdict::Exceeded { retry_after, .. } => {
                    wait = Some(retry_after);
                    break;
                }
                Verdict::TooHeavy { limit } if keep.is_empty() => {
                    let reason = format!(
                        "transaction {} alone weighs {w}, more than the limit {limit} of {mid}",
                        i + 1,
                    );
                    self.dead_letter(&item.id, reason, batch);
                    return false;
                }
                Verdict::TooHeavy { .. } => break,
                Verdict::Unavailable { reason } => {
                    wait = Some(UNAVAILABLE_RETRY);
                    if keep.is_empty() {
                        let reason = format!("quota unavailable: {reason}");
                        self.hold(&item.id, UNAVAILABLE_RETRY, reason, batch);
                        return false;
                    }
                    break;
                }
                Verdict::Misconfigured { reason } => {
                    wait = Some(MISCONFIGURED_RETRY);
                    if keep.is_empty() {
                        let reason = format!("quota misconfigured: {reason}");
                        self.hold(&item.id, MISCONFIGURED_RETRY, reason, batch);
                        return false;
                    }
                    break;
                }
            }
        }
        let wait = wait.unwrap_or(Duration::from_secs(1));
        if keep.is_empty() {
            let reason = format!("over quota: {mid}; no transaction fits yet");
            self.hold(&item.id, wait, reason, batch);
            return false;
        }
        if keep.len() == weights.len() {
            self.admit(&item.id, None, batch);
            return true;
        }
        let rest: Vec<usize> = (keep.len()..weights.len()).collect();
        let parts = self.parts.clone();
        let (keep2, rest2) = (keep.clone(), rest.clone());
        let written = tokio::task::spawn_blocking(move || -> Result<_, String> {
            let layout = layout.ok_or("split failed: no layout")?;
            let c1 = parts.spool.next_control_number().map_err(|e| e.to_string())?;
            let c2 = parts.spool.next_control_number().map_err(|e| e.to_string())?;
            let (a, _) = envelope::split(&bytes, &layout, &keep2, c1).ok_or("split failed")?;
            let (r, rest_layout) =
                envelope::split(&bytes, &layout, &rest2, c2).ok_or("split failed")?;
            let (fa, fr) = parts.spool.store_parts(&a, &r).map_err(|e| e.to_string())?;
            Ok((c1, fa, a.len() as u64, fr, r.len() as u64, rest_layout))
        })
        .await;
        let (c1, fa, alen, fr, rlen, rest_layout) = match written.map_err(|e| e.to_string()) {
            Ok(Ok(x)) => x,
            Ok(Err(e)) | Err(e) => {
                self.give_back(mid.clone(), item.id.clone(), charges);
                return self.hold_after_split_failure(&item.id, e, batch);
            }
        };
        let admitted_weight: u64 = keep.iter().map(|&i| weights[i]).sum();
        let part = Item {
            id: format!("{}-s{c1:09}", item.id),
            state: State::Admitted,
            spool_file: fa.clone(),
            start: 0,
            end: alen,
            weight: admitted_weight,
            next_attempt_at: None,
            attempts: 0,
            reason: Some(format!(
                "transactions 1-{} of {} split off {}",
                keep.len(),
                weights.len(),
                item.id
            )),
            // Admitted whole: it is never split again.
            layout: None,
            charge: None,
            part_charges: charges,
            ..item.clone()
        };
        self.hold_file(&fa, &part.id);
        self.hold_file(&fr, &item.id);
        self.release_file(&item.spool_file, &item.id, batch);
        batch.put(&part);
        batch.dispatch.push(part.id.clone());
        self.live.insert(part.id.clone(), Box::new(part.clone()));
        if let Some(rem) = self.live.get_mut(&item.id) {
            rem.spool_file = fr;
            rem.start = 0;
            rem.end = rlen;
            rem.layout = Some(rest_layout);
            rem.weight = item.weight.saturating_sub(admitted_weight);
        }
        let reason = format!(
            "split: {} of {} transactions delivered as {}; the rest is over quota for {mid}",
            keep.len(),
            weights.len(),
            part.id
        );
        self.hold(&item.id, wait, reason, batch);
        true
    }
}
