//! The pipeline: one task that owns every live item and moves it from state to state.
//!
//! `received file → parse (unless intake did) → per interchange: dedup → route → meter →
//! deliver | hold | reject`.
//!
//! Invariants:
//! - **One writer.** Only this task changes item state. Inbound, uploads, deliveries and the
//!   admin API send it [`Event`]s; it applies a batch of them (and the results of the
//!   deliveries it starts that end at once), commits one spool transaction, and only then
//!   answers the admin API and applies the next batch. "Delivered" is written only after the
//!   target has the bytes (at least once).
//! - **Nothing is lost on restart.** On start it reloads every `received`, `admitted` and
//!   `held` item and every file not yet split into items: admitted items are delivered,
//!   received ones metered, held ones re-metered when due.
//! - **Order per metering id.** Held items are re-metered oldest first (see [`crate::hold`]),
//!   and admitted items are delivered one at a time per metering id, oldest first (see
//!   `crate::lane`).
//! - **Held items behind a head rest in the spool.** Memory grows with the groups held, not
//!   with what they hold: an item waiting behind its group's head is kept as its row only,
//!   and read back when it is needed (see `resting`).
//! - **A duplicate consumes no quota**: dedup runs before metering, and only interchanges that
//!   passed parsing record their key. On `dedup = "transaction"` routes, resent transactions
//!   are removed before each metering (see `duplicates`), and a fingerprint stays claimed only
//!   while its item is admitted.
//! - **A failed commit is not dropped.** Its change is written first with the next commit,
//!   tried within a second if nothing else comes; its spool files are kept till then (`unsaved`).
//! - **A file leaves intake exactly once.** A file the parser fails on (a panic, caught per
//!   file) becomes one `rejected` item with the reason, committed with the removal of its
//!   `files` row like any other file's items.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tollgate_quota::{AnyStore, MeteringId};

use crate::config::{OnQuotaUnavailable, Plan, Route};
use crate::delivery::{Attempt, Deliverer, MAX_ATTEMPTS, Parcel, backoff};
use crate::envelope;
use crate::hold::{HoldQueue, jittered};
use crate::item::{ArrivalOrder, Item, State, rfc3339};
use crate::lane::Lanes;
use crate::meter::{Meter, Verdict};
use crate::receipt::{parser_failed, prepare};
use crate::spool::{Change, FileRecord, Spool, SpoolError};
use crate::telemetry::{self, Counter};

mod admin;
mod delivering;
mod duplicates;
mod event;
mod fair_queue;
mod metering;
mod receiving;
mod refund;
mod resting;
mod unsaved;

use delivering::{AttemptGate, Recorded};
use fair_queue::FairQueue;

pub(crate) use admin::row;
pub use duplicates::fingerprint_key;
pub(crate) use event::{AdminError, AdminOp, Event};

/// How often the hold queue is looked at, while it holds items, when nothing else wakes the
/// pipeline.
const IDLE_TICK: Duration = Duration::from_millis(250);
/// How long a held item waits when the quota service is unavailable and `on_unavailable = "hold"`.
const UNAVAILABLE_RETRY: Duration = Duration::from_secs(1);
/// How long a held item waits when the quota service refuses the gateway's requests (a wrong
/// key or URL): an operator's fix is needed, so the service is not asked more often than this.
const MISCONFIGURED_RETRY: Duration = Duration::from_secs(5);
/// Events applied in one spool transaction at most.
const MAX_BATCH: usize = 512;
/// Received files parsed in one batch at most (more wait for the next batch).
const MAX_FILES: usize = 128;

/// The parts the pipeline works with, shared with its delivery tasks.
pub struct Parts {
    /// The validated configuration.
    pub plan: Plan,
    /// Files and item state.
    pub spool: Arc<Spool>,
    /// Quota checks.
    pub meter: Meter,
    /// Delivery targets.
    pub deliverer: Deliverer,
    /// Where transaction fingerprints are claimed: the server's store, shared by every
    /// instance on it.
    pub seen: Arc<AnyStore>,
}

/// The pipeline task's state.
pub(crate) struct Pipeline {
    parts: Arc<Parts>,
    events: mpsc::UnboundedSender<Event>,
    live: HashMap<String, Box<Item>>,
    held: HoldQueue,
    /// Held items not in `live`: they wait behind their group's head (see `resting`).
    resting: usize,
    /// Unix ms before which a head at rest is not read again (after a failed read).
    wake_after: i64,
    /// Admitted items waiting for delivery, one lane per metering id.
    lanes: Lanes,
    /// Items whose delivery task is running (or sleeping until its retry time), with the
    /// task's progress: an operator may cancel it only before its attempt starts.
    in_flight: HashMap<String, Arc<AttemptGate>>,
    /// Spool file → the items (and queued files) still referring to it that are not
    /// delivered. A set, not a count: letting go twice for one holder frees nothing more.
    file_holders: HashMap<String, HashSet<String>>,
    /// Received files waiting to be parsed, fair across senders.
    intake: FairQueue,
    deliveries: JoinSet<()>,
    /// A batch whose commit failed, written first with the next one.
    unsaved: unsaved::Unsaved,
}

type Reply = (oneshot::Sender<Result<Option<Item>, AdminError>>, Result<Option<Item>, AdminError>);

/// What one batch changes, and what to do once it is committed.
#[derive(Default)]
struct Batch {
    change: Change,
    dispatch: Vec<String>,
    replies: Vec<Reply>,
    drop_files: Vec<String>,
    /// The attempts whose results it writes: marked recorded when it is dropped, after its
    /// commit.
    recorded: Recorded,
}

impl Batch {
    fn put(&mut self, item: &Item) {
        self.change.put.push(item.clone());
    }
}

impl Pipeline {
    /// Loads the live items from the spool and returns the pipeline, ready to [`Pipeline::run`].
    pub(crate) fn load(
        parts: Arc<Parts>,
        events: mpsc::UnboundedSender<Event>,
    ) -> Result<(Self, Vec<FileRecord>), SpoolError> {
        let mut p = Pipeline {
            parts,
            events,
            live: HashMap::new(),
            held: HoldQueue::default(),
            resting: 0,
            wake_after: i64::MIN,
            lanes: Lanes::default(),
            in_flight: HashMap::new(),
            file_holders: HashMap::new(),
            intake: FairQueue::default(),
            deliveries: JoinSet::new(),
            unsaved: unsaved::Unsaved::default(),
        };
        for item in p.parts.spool.items(None)? {
            if item.state != State::Delivered {
                p.hold_file(&item.spool_file, &item.id);
            }
            if item.state.is_terminal() {
                continue;
            }
            if item.state == State::Held
                && let Some(m) = &item.metering_id
            {
                p.held.insert(m, &item.id);
            }
            p.live.insert(item.id.clone(), Box::new(item));
        }
        p.rest_loaded();
        // The held gauges start at zero (`telemetry::register`): count in what was held.
        let heads: Vec<String> = p.held.heads().map(|(_, h)| h.to_owned()).collect();
        for head in heads {
            if let Some(m) = p.live.get(&head).and_then(|i| i.metering_id.clone()) {
                p.update_held_gauge(&head, &m);
            }
        }
        let pending = p.parts.spool.pending_files()?;
        Ok((p, pending))
    }

    /// Runs until `stop` turns true; then stops taking events and aborts delivery tasks
    /// (their items stay admitted on disk and are delivered after the next start).
    pub(crate) async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Event>,
        pending: Vec<FileRecord>,
        mut stop: watch::Receiver<bool>,
    ) {
        // Resume: files not yet split, items admitted but not delivered, items not metered.
        let mut batch = Batch::default();
        for rec in pending {
            self.queue_file(rec);
        }
        let mut resume: Vec<ArrivalOrder> = self
            .live
            .values()
            .filter(|i| matches!(i.state, State::Received | State::Admitted))
            .map(|i| ArrivalOrder(i.id.clone()))
            .collect();
        resume.sort();
        for ArrivalOrder(id) in resume {
            if self.live.get(&id).is_some_and(|i| i.state == State::Admitted) {
                batch.dispatch.push(id);
            } else {
                self.meter_new(&id, &mut batch).await;
            }
        }
        self.finish(batch, &mut rx).await;

        loop {
            let mut events = Vec::new();
            if self.intake.is_empty() {
                // Nothing to parse: wait for an event or the next held item's retry time.
                // With nothing held there is nothing to look at until an event comes (and no
                // timer, so a simulation's paused clock moves straight to its next arrival).
                let wake = self
                    .next_hold_due()
                    .or_else(|| (!self.held.is_empty()).then(|| Instant::now() + IDLE_TICK));
                let wake = self.unsaved.wake(wake);
                let idle = async move {
                    match wake {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    biased;
                    _ = stop.changed() => break,
                    ev = rx.recv() => match ev {
                        Some(ev) => events.push(ev),
                        None => break,
                    },
                    _ = idle => {}
                    Some(_) = self.deliveries.join_next(), if !self.deliveries.is_empty() => continue,
                }
            } else if *stop.borrow() {
                break;
            }
            while events.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(e) => events.push(e),
                    Err(_) => break,
                }
            }
            while self.deliveries.try_join_next().is_some() {}
            let mut batch = Batch::default();
            self.apply(events, &mut batch).await;
            // Files are parsed a bounded number at a time, round-robin across senders, so one
            // partner's backlog does not hold up the others' files.
            let files = self.intake.take(MAX_FILES);
            if !files.is_empty() {
                self.take_files(files, &mut batch).await;
            }
            if self.next_hold_due().is_some_and(|at| at <= Instant::now()) {
                self.retry_held(&mut batch).await;
            }
            self.finish(batch, &mut rx).await;
        }
        self.deliveries.abort_all();
        while self.deliveries.join_next().await.is_some() {}
    }

    /// Queues a received file for parsing; its spool file is kept until it is parsed.
    fn queue_file(&mut self, rec: FileRecord) {
        self.hold_file(&rec.spool, &queued_holder(&rec.id));
        self.intake.push(rec);
    }

    async fn apply(&mut self, events: Vec<Event>, batch: &mut Batch) {
        for ev in events {
            match ev {
                Event::Received(recs) => {
                    for rec in recs {
                        self.queue_file(rec);
                    }
                }
                Event::Delivery { id, attempt } => self.delivery_result(&id, attempt, batch),
                Event::Admin { id, op, only_if, reply } => {
                    let result = self.admin(&id, op, only_if.as_deref(), batch).await;
                    batch.replies.push((reply, result));
                }
                Event::GivenBack { metering_id } => self.given_back(&metering_id),
            }
        }
    }

    /// Starts the batch's deliveries and takes in the results of those that end at once,
    /// commits the batch, then answers the admin API and drops spool files.
    async fn finish(&mut self, mut batch: Batch, rx: &mut mpsc::UnboundedReceiver<Event>) {
        // Deliveries start while the batch commits: if the commit is lost, the item is
        // metered and delivered again under the same id (at least once). A result that is
        // ready before the commit joins the batch: admitted and delivered are then written
        // by one commit, or neither is.
        self.start_deliveries(&mut batch, rx).await;
        // `_recorded` lives to the end: its attempts are recorded after the commit, however
        // that ends.
        let Batch { change, dispatch: _, replies, drop_files, recorded: _recorded } = batch;
        let retrying = !self.unsaved.is_empty();
        let (change, mut drop_files) = self.unsaved.before(change, drop_files);
        if !change.is_empty() {
            let spool = self.parts.spool.clone();
            let inline = spool.is_ephemeral();
            let res = crate::blocking::off_runtime(inline, move || {
                let res = spool.commit(&change);
                (res, change)
            })
            .await;
            let err = match res {
                Ok((Ok(()), change)) => {
                    self.settle_held(&change);
                    None
                }
                Ok((Err(e), change)) => {
                    // Written first with the next commit (see `unsaved`).
                    self.unsaved.keep(change, std::mem::take(&mut drop_files));
                    Some(e.to_string())
                }
                Err(e) => Some(e),
            };
            if let Some(e) = err {
                // Once, not once a second while the disk stays full.
                if retrying {
                    tracing::debug!(error = %e, "spool commit failed again");
                } else {
                    tracing::error!(error = %e, "spool commit failed");
                }
                for (reply, _) in replies {
                    let _ = reply.send(Err(AdminError::Spool(e.clone())));
                }
                return;
            }
        }
        for (reply, result) in replies {
            let _ = reply.send(result);
        }
        for f in drop_files {
            self.parts.spool.remove_file(&f);
        }
        let (held, admitted) = (self.held.len(), self.lanes.len());
        telemetry::queue_depth("held", held);
        telemetry::queue_depth("admitted", admitted);
        telemetry::queue_depth("received", self.received_depth());
    }

    fn route_of(&self, item: &Item) -> Option<(Route, MeteringId)> {
        let route = item
            .route
            .as_ref()
            .and_then(|r| self.parts.plan.routes.iter().find(|x| &x.name == r))?;
        let mid = item.metering_id.clone().unwrap_or_else(|| route.metering_id(&item.partner));
        Some((route.clone(), mid))
    }

    fn admit(&mut self, id: &str, reason: Option<String>, batch: &mut Batch) {
        let Some(item) = self.live.get_mut(id) else { return };
        if item.state == State::Held
            && let Some(m) = &item.metering_id
        {
            self.held.remove(m, id);
        }
        item.state = State::Admitted;
        item.next_attempt_at = None;
        item.attempts = 0;
        item.reason = reason;
        batch.put(item);
        batch.dispatch.push(id.to_owned());
        if let Some(m) = item.metering_id.clone() {
            self.update_held_gauge(id, &m);
        }
    }

    fn hold(&mut self, id: &str, retry_after: Duration, reason: String, batch: &mut Batch) {
        let Some(item) = self.live.get_mut(id) else { return };
        let wait = jittered(self.parts.spool.clock(), retry_after);
        let wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
        let at = self.parts.spool.now_ms().saturating_add(wait_ms);
        if item.state != State::Held {
            telemetry::count(Counter::Held, item, &self.parts.plan);
        } else {
            item.attempts += 1;
        }
        self.parts.meter.held(item);
        item.state = State::Held;
        item.held_at.get_or_insert(self.parts.spool.now_ms());
        item.next_attempt_at = Some(at);
        item.reason = Some(reason);
        batch.put(item);
        if let Some(m) = item.metering_id.clone() {
            self.held.insert(&m, id);
            self.update_held_gauge(id, &m);
        }
    }

    /// Moves an item to `dead` with the reason; only an operator brings it back.
    fn dead_letter(&mut self, id: &str, reason: String, batch: &mut Batch) {
        let Some(mut item) = self.live.remove(id) else { return };
        if let Some(m) = &item.metering_id {
            self.held.remove(m, id);
        }
        tracing::warn!(
            item = id,
            partner = %item.partner,
            metering_id = item.metering_id.as_ref().map(MeteringId::as_str),
            %reason,
            "dead"
        );
        self.refund_unsent(&mut item);
        item.state = State::Dead;
        // The layout is kept: an operator's retry may meter (and split) it again.
        item.next_attempt_at = None;
        item.reason = Some(reason);
        telemetry::count(Counter::Dead, &item, &self.parts.plan);
        batch.put(&item);
        if let Some(m) = item.metering_id.clone() {
            telemetry::held_depth(&self.parts.plan, &item, self.held.depth(&m));
        }
    }

    fn update_held_gauge(&self, id: &str, m: &MeteringId) {
        if let Some(item) = self.live.get(id) {
            telemetry::held_depth(&self.parts.plan, item, self.held.depth(m));
        }
    }

    /// `holder` (an item id, or a queued file's [`queued_holder`]) needs spool file `file`.
    fn hold_file(&mut self, file: &str, holder: &str) {
        self.file_holders.entry(file.to_owned()).or_default().insert(holder.to_owned());
    }

    /// `holder` no longer needs spool file `file`; the file goes once nothing holds it.
    /// Idempotent: a holder that lets go twice (a purge repeated) frees nothing else.
    fn release_file(&mut self, file: &str, holder: &str, batch: &mut Batch) {
        if let Some(holders) = self.file_holders.get_mut(file) {
            holders.remove(holder);
            if holders.is_empty() {
                self.file_holders.remove(file);
                batch.drop_files.push(file.to_owned());
            }
        }
    }
}

/// The holder name of a received file still queued for parsing (no item id has a space).
fn queued_holder(file_id: &str) -> String {
    format!("file {file_id}")
}

#[cfg(test)]
mod tests;
