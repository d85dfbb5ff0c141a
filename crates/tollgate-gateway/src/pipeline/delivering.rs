//! Delivering admitted items: one lane per metering id (see `crate::lane`), one delivery task
//! per lane's current run, which delivers the run's items one after another and reports each
//! attempt's result; applying a result (delivered, retried with backoff, or dead-lettered)
//! lets the lane go on.
//!
//! A run's task stops at its first attempt that is not delivered: the pipeline then cancels
//! the rest of the run, and starts the run again (after the retry's wait) or the lane's next.
//! So a lane has a task working on it exactly when its run's head is in `in_flight`.
//!
//! A task starts an attempt only once every delivered attempt of its run but the last is
//! recorded (its batch committed): a kill repeats, per lane, at most the attempt under way and
//! one delivered attempt (at least once). An ephemeral spool (a simulation) has no restart, so
//! its tasks do not wait.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use tokio::sync::Notify;

use super::*;

/// The most items one delivery task takes from a lane.
const RUN: usize = 64;

/// The progress of one item's attempt, shared by its delivery task and the pipeline, so that
/// an operator's purge and the task's start of the attempt cannot both win: whoever moves the
/// gate off `WAITING` first decides.
///
/// Once the attempt is delivered, the pipeline marks it recorded after the commit that writes
/// it, which the task waits for before its attempt after next.
#[derive(Debug, Default)]
pub(super) struct AttemptGate {
    state: AtomicU8,
    recorded: AtomicBool,
    on_record: Notify,
}

impl AttemptGate {
    const WAITING: u8 = 0;
    const STARTED: u8 = 1;
    const CANCELLED: u8 = 2;

    /// The task is about to read and send the item: false when it was cancelled first.
    fn start(&self) -> bool {
        self.state
            .compare_exchange(Self::WAITING, Self::STARTED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Cancels the task while it still waits for its attempt's time: false when the attempt
    /// has started (its outcome must be awaited).
    pub(super) fn cancel(&self) -> bool {
        self.state
            .compare_exchange(Self::WAITING, Self::CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The commit that writes the attempt's result is over (a failed one too: its state stays
    /// in memory, and a lane does not stop for it).
    pub(super) fn record(&self) {
        self.recorded.store(true, Ordering::Release);
        self.on_record.notify_waiters();
    }

    /// Waits until [`AttemptGate::record`].
    async fn recorded(&self) {
        loop {
            let notified = self.on_record.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.recorded.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

/// Attempts whose results a batch writes; dropped after its commit, it marks them recorded.
#[derive(Default)]
pub(super) struct Recorded(Vec<Arc<AttemptGate>>);

impl Drop for Recorded {
    fn drop(&mut self) {
        self.0.iter().for_each(|gate| gate.record());
    }
}

/// One item of a run, as its delivery task needs it.
struct Planned {
    id: String,
    gate: Arc<AttemptGate>,
    /// When its attempt may start (a retry's time), if later than now.
    at: Option<Instant>,
    route: Route,
    file: String,
    start: u64,
    end: u64,
    partner: String,
    document: String,
}

impl Planned {
    /// Waits for a slot of the route's target, reads the item's bytes from the spool and
    /// makes one delivery attempt.
    async fn attempt(self, parts: &Parts) -> (String, Attempt) {
        let slot = match parts.deliverer.slot(&self.route).await {
            Ok(slot) => slot,
            Err(attempt) => return (self.id, attempt),
        };
        let spool = parts.spool.clone();
        let (file, start, end) = (self.file, self.start, self.end);
        let inline = spool.is_ephemeral();
        let bytes =
            crate::blocking::off_runtime(inline, move || spool.read(&file, start, end)).await;
        let attempt = match bytes {
            Ok(Ok(bytes)) => {
                let parcel =
                    Parcel { id: self.id, partner: self.partner, document: self.document, bytes };
                let attempt = parts.deliverer.deliver(&self.route, &parcel, slot).await;
                return (parcel.id, attempt);
            }
            Ok(Err(e)) => Attempt::Retry(format!("reading the spool: {e}")),
            Err(e) => Attempt::Retry(format!("reading the spool: {e}")),
        };
        (self.id, attempt)
    }
}

impl Pipeline {
    /// Puts admitted items in their lanes, then starts each idle lane's run.
    pub(super) fn dispatch(&mut self, ids: &[String]) {
        let mut lanes: Vec<String> = Vec::new();
        for id in ids {
            let Some(item) = self.live.get(id) else { continue };
            let lane = item.metering_id.as_ref().map_or(item.partner.as_str(), MeteringId::as_str);
            self.lanes.push(lane, id);
            if !lanes.iter().any(|l| l == lane) {
                lanes.push(lane.to_owned());
            }
        }
        for lane in lanes {
            self.start_lane(&lane);
        }
    }

    /// Starts the batch's deliveries, then takes the results of those that end at once into
    /// the batch (at most [`MAX_BATCH`] events), starting what they let go on.
    pub(super) async fn start_deliveries(
        &mut self,
        batch: &mut Batch,
        rx: &mut mpsc::UnboundedReceiver<Event>,
    ) {
        let mut taken = 0;
        loop {
            let dispatch = std::mem::take(&mut batch.dispatch);
            self.dispatch(&dispatch);
            // Results come only from delivery tasks: with none, there is nothing to wait for.
            if taken >= MAX_BATCH || self.deliveries.is_empty() {
                return;
            }
            tokio::task::yield_now().await;
            let mut ready = Vec::new();
            while taken + ready.len() < MAX_BATCH
                && let Ok(e) = rx.try_recv()
            {
                ready.push(e);
            }
            if ready.is_empty() {
                return;
            }
            taken += ready.len();
            self.apply(ready, batch).await;
        }
    }

    /// Starts a delivery task on the lane's current run unless one is working on it.
    pub(super) fn start_lane(&mut self, lane: &str) {
        let now_ms = self.parts.spool.now_ms();
        let mut planned = Vec::new();
        while planned.is_empty() {
            let Some(run) = self.lanes.take_run(lane, RUN) else { return };
            if run.front().is_some_and(|head| self.in_flight.contains_key(head)) {
                return;
            }
            let run: Vec<String> = run.iter().cloned().collect();
            for id in run {
                let Some((item, (route, _))) =
                    self.live.get(&id).and_then(|i| Some((i, self.route_of(i)?)))
                else {
                    // Gone without a delivery result, or no route (never expected): let go.
                    self.lanes.finish(&id);
                    continue;
                };
                let wait = item.next_attempt_at.map_or(0, |at| at - now_ms);
                let at = u64::try_from(wait)
                    .ok()
                    .filter(|w| *w > 0)
                    .map(|w| Instant::now() + Duration::from_millis(w));
                planned.push(Planned {
                    id,
                    gate: Arc::new(AttemptGate::default()),
                    at,
                    route,
                    file: item.spool_file.clone(),
                    start: item.start,
                    end: item.end,
                    partner: item.partner.clone(),
                    document: item.document.clone(),
                });
            }
        }
        for p in &planned {
            self.in_flight.insert(p.id.clone(), p.gate.clone());
        }
        let parts = self.parts.clone();
        let events = self.events.clone();
        let waits = !parts.spool.is_ephemeral();
        self.deliveries.spawn(async move {
            // The last delivered attempt, which may not be recorded yet.
            let mut last: Option<Arc<AttemptGate>> = None;
            for p in planned {
                if let Some(at) = p.at {
                    tokio::time::sleep_until(at).await;
                }
                if !p.gate.start() {
                    continue; // purged while waiting: the pipeline has let it go
                }
                let gate = p.gate.clone();
                let (id, attempt) = p.attempt(&parts).await;
                let delivered = matches!(attempt, Attempt::Done);
                // After a result that is not delivered, this task starts nothing more: the
                // pipeline cancels the rest of the run (`stop_run`).
                if events.send(Event::Delivery { id, attempt }).is_err() || !delivered {
                    return;
                }
                if let Some(before) = last.replace(gate).filter(|_| waits) {
                    before.recorded().await;
                }
            }
        });
    }

    /// The task delivering `id`'s run has stopped at `id`: the rest of the run is cancelled,
    /// so that the lane's next task may take it.
    fn stop_run(&mut self, id: &str) {
        let Some(run) = self.lanes.run_of(id) else { return };
        let rest: Vec<String> = run.iter().filter(|r| *r != id).cloned().collect();
        for other in rest {
            if let Some(gate) = self.in_flight.remove(&other) {
                gate.cancel();
            }
        }
    }

    /// Applies a delivery attempt's result, then lets the lane's next item start unless this
    /// one is being retried.
    pub(super) fn delivery_result(&mut self, id: &str, attempt: Attempt, batch: &mut Batch) {
        if let Some(gate) = self.in_flight.remove(id) {
            batch.recorded.0.push(gate);
        }
        let retry = matches!(attempt, Attempt::Retry(_));
        if !matches!(attempt, Attempt::Done) {
            self.stop_run(id);
        }
        self.apply_attempt(id, attempt, batch);
        let still_current = self.live.get(id).is_some_and(|i| i.state == State::Admitted);
        if !(retry && still_current) {
            // Delivered, dead or purged: the lane's next item may start.
            if let Some(lane) = self.lanes.finish(id) {
                self.start_lane(&lane);
            }
        }
    }

    /// Delivered, retried later, or dead-lettered, per the attempt.
    pub(super) fn apply_attempt(&mut self, id: &str, attempt: Attempt, batch: &mut Batch) {
        let Some(item) = self.live.get_mut(id) else { return }; // purged meanwhile
        if item.state != State::Admitted {
            return; // changed by an operator meanwhile
        }
        item.attempts += 1;
        if !matches!(attempt, Attempt::Done) {
            telemetry::count(Counter::DeliveryError, item, &self.parts.plan);
        }
        match attempt {
            Attempt::Done => {
                let now = self.parts.spool.now_ms();
                let Some(mut item) = self.live.remove(id) else { return };
                item.state = State::Delivered;
                item.charge = None;
                item.part_charges.clear();
                item.delivered_at = Some(now);
                item.next_attempt_at = None;
                item.layout = None; // never split again: not kept in the store
                let latency =
                    Duration::from_millis(u64::try_from(now - item.received_at).unwrap_or(0));
                telemetry::count(Counter::Delivered, &item, &self.parts.plan);
                telemetry::delivery_latency(&item, &self.parts.plan, latency);
                batch.put(&item);
                self.release_file(&item.spool_file, id, batch);
            }
            Attempt::Retry(reason) if item.attempts < MAX_ATTEMPTS => {
                let wait = backoff(item.attempts);
                item.next_attempt_at = Some(
                    self.parts.spool.now_ms()
                        + i64::try_from(wait.as_millis()).unwrap_or(i64::MAX / 2),
                );
                tracing::warn!(
                    item = id,
                    partner = %item.partner,
                    metering_id = item.metering_id.as_ref().map(MeteringId::as_str),
                    attempts = item.attempts,
                    %reason,
                    "delivery failed; retrying"
                );
                item.reason = Some(reason);
                batch.put(item);
                batch.dispatch.push(id.to_owned());
            }
            Attempt::Retry(reason) => {
                let n = item.attempts;
                self.dead_letter(
                    id,
                    format!("gave up after {n} delivery attempts: {reason}"),
                    batch,
                );
            }
            Attempt::Refused(reason) => {
                self.dead_letter(id, format!("delivery refused: {reason}"), batch);
            }
        }
    }
}
