//! Delivering admitted items: one lane per metering id (see `crate::lane`), a delivery task per
//! lane's current item, and applying each attempt's result (delivered, retried with backoff,
//! or dead-lettered), which lets the lane's next item start.

use std::sync::atomic::{AtomicU8, Ordering};

use super::*;

/// The progress of one delivery task, shared by the task and the pipeline, so that an
/// operator's purge and the task's start of its attempt cannot both win: whoever moves the
/// gate off `WAITING` first decides.
#[derive(Debug, Default)]
pub(super) struct AttemptGate(AtomicU8);

impl AttemptGate {
    const WAITING: u8 = 0;
    const STARTED: u8 = 1;
    const CANCELLED: u8 = 2;

    /// The task is about to read and send the item: false when it was cancelled first.
    fn start(&self) -> bool {
        self.0
            .compare_exchange(Self::WAITING, Self::STARTED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Cancels the task while it still waits for its attempt's time: false when the attempt
    /// has started (its outcome must be awaited).
    pub(super) fn cancel(&self) -> bool {
        self.0
            .compare_exchange(Self::WAITING, Self::CANCELLED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

impl Pipeline {
    /// Puts an admitted item in its lane and starts the lane's current item if it is idle.
    pub(super) fn dispatch(&mut self, id: &str) {
        let Some(item) = self.live.get(id) else { return };
        let lane = item.metering_id.as_ref().map_or(item.partner.as_str(), MeteringId::as_str);
        let lane = lane.to_owned();
        self.lanes.push(&lane, id);
        self.start_lane(&lane);
    }

    /// Starts the delivery of a lane's current item unless it is already running.
    pub(super) fn start_lane(&mut self, lane: &str) {
        let Some(id) = self.lanes.current(lane).map(str::to_owned) else { return };
        if self.in_flight.contains_key(&id) {
            return;
        }
        let Some(item) = self.live.get(&id) else {
            // Gone without a delivery result (never expected): free the lane.
            self.lanes.finish(&id);
            return self.start_lane(lane);
        };
        let Some((route, _)) = self.route_of(item) else {
            self.lanes.finish(&id);
            return self.start_lane(lane);
        };
        let delay = item
            .next_attempt_at
            .map(|at| {
                Duration::from_millis(u64::try_from(at - self.parts.spool.now_ms()).unwrap_or(0))
            })
            .unwrap_or_default();
        let parts = self.parts.clone();
        let events = self.events.clone();
        let (file, start, end) = (item.spool_file.clone(), item.start, item.end);
        let (partner, document) = (item.partner.clone(), item.document.clone());
        let gate = Arc::new(AttemptGate::default());
        self.in_flight.insert(id.clone(), gate.clone());
        self.deliveries.spawn(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if !gate.start() {
                return; // purged while waiting: the pipeline has already let the lane go on
            }
            let p2 = parts.clone();
            let inline = p2.spool.is_ephemeral();
            let bytes =
                crate::blocking::off_runtime(inline, move || p2.spool.read(&file, start, end))
                    .await;
            let attempt = match bytes {
                Ok(Ok(bytes)) => {
                    let parcel = Parcel { id: id.clone(), partner, document, bytes };
                    parts.deliverer.deliver(&route, &parcel).await
                }
                Ok(Err(e)) => Attempt::Retry(format!("reading the spool: {e}")),
                Err(e) => Attempt::Retry(format!("reading the spool: {e}")),
            };
            let _ = events.send(Event::Delivery { id, attempt });
        });
    }

    /// Applies a delivery attempt's result, then lets the lane's next item start unless this
    /// one is being retried.
    pub(super) fn delivery_result(&mut self, id: &str, attempt: Attempt, batch: &mut Batch) {
        self.in_flight.remove(id);
        let retry = matches!(attempt, Attempt::Retry(_));
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
