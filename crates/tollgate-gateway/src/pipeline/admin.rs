//! The admin API's operations on the pipeline (retry, release, purge, look up), applied by
//! the pipeline task itself like every other event, and the JSON view of an item.

use super::*;

impl Pipeline {
    pub(super) async fn admin(
        &mut self,
        id: &str,
        op: AdminOp,
        only_if: Option<&crate::filter::QueueFilter>,
        batch: &mut Batch,
    ) -> Result<Option<Item>, AdminError> {
        let item = self.current(id, batch).await?.ok_or(AdminError::NotFound)?;
        if let Some(filter) = only_if
            && !filter.matches(&item)
        {
            return Err(AdminError::Conflict(format!(
                "item {id} no longer passes the filter: it is {} now",
                item.state
            )));
        }
        self.wake_read(&item);
        match op {
            AdminOp::Purge => self.purge(item, batch).await,
            AdminOp::Retry | AdminOp::Release => {
                let allowed = match op {
                    AdminOp::Retry => matches!(item.state, State::Held | State::Dead),
                    _ => matches!(
                        item.state,
                        State::Held | State::Dead | State::Duplicate | State::Rejected
                    ),
                };
                if !allowed {
                    let verb = if op == AdminOp::Retry { "retried" } else { "released" };
                    return Err(AdminError::Conflict(format!(
                        "item {id} is {}: it cannot be {verb}",
                        item.state
                    )));
                }
                if self.route_of(&item).is_none() {
                    return Err(AdminError::Conflict(format!(
                        "item {id} has no route (document {:?}): nowhere to deliver it",
                        item.document
                    )));
                }
                if !self.live.contains_key(id) {
                    let mut revived = item.clone();
                    revived.state = State::Received;
                    revived.attempts = 0;
                    self.live.insert(id.to_owned(), Box::new(revived));
                }
                if op == AdminOp::Release {
                    self.claim_released(id).await;
                    self.admit(id, Some("released by an operator".into()), batch);
                } else {
                    if let Some(m) = &item.metering_id {
                        self.held.remove(m, id);
                    }
                    if let Some(i) = self.live.get_mut(id) {
                        i.state = State::Received;
                    }
                    self.meter(id, batch).await;
                }
                Ok(self
                    .live
                    .get(id)
                    .map(|i| Item::clone(i))
                    .or_else(|| batch.change.put.iter().rev().find(|i| i.id == id).cloned()))
            }
        }
    }

    /// The item as the batch under way leaves it: `None` once purged (in this batch or
    /// before), else the live item, else the version this batch wrote, else the version a
    /// batch whose commit failed wrote (kept for the next commit), else the stored one. So a
    /// second purge, or a release after a purge or a delivery, never finds it as it was; an
    /// operator who repeats a release answered 503 (the disk full) does not deliver it twice.
    async fn current(&self, id: &str, batch: &Batch) -> Result<Option<Item>, AdminError> {
        if batch.change.delete.iter().any(|d| d == id) {
            return Ok(None);
        }
        if let Some(item) = self.live.get(id) {
            return Ok(Some(Item::clone(item)));
        }
        if let Some(item) = batch.change.put.iter().rev().find(|i| i.id == id) {
            return Ok(Some(item.clone()));
        }
        if let Some(kept) = self.unsaved.item(id) {
            return Ok(kept.cloned());
        }
        self.stored(id).await.map_err(AdminError::Spool)
    }

    /// Removes an item that was not delivered, and lets go of its spool file and its
    /// fingerprints. An item whose delivery attempt has started is refused (its outcome is not
    /// known yet); one waiting for its next attempt is cancelled first, so a purged item is
    /// never delivered, before or after.
    async fn purge(
        &mut self,
        mut item: Item,
        batch: &mut Batch,
    ) -> Result<Option<Item>, AdminError> {
        let id = item.id.as_str();
        if item.state == State::Delivered {
            // Its bytes are the target's now; the row leaves with the dedup window.
            return Err(AdminError::Conflict(format!(
                "item {id} is delivered: there is nothing left to purge"
            )));
        }
        if let Some(gate) = self.in_flight.get(id) {
            if !gate.cancel() {
                return Err(AdminError::InFlight(format!(
                    "item {id} is being delivered now: purge it once this attempt ends \
                     (it is then delivered, or waits for its next attempt)"
                )));
            }
            self.in_flight.remove(id);
        }
        if let Some(m) = &item.metering_id {
            self.held.remove(m, id);
        }
        self.live.remove(id);
        if let Some(lane) = self.lanes.finish(id) {
            self.start_lane(&lane);
        }
        batch.change.delete.push(id.to_owned());
        self.release_file(&item.spool_file, id, batch);
        if item.state == State::Admitted {
            self.refund_unsent(&mut item);
        }
        self.return_claims(&item).await;
        if let Some(m) = &item.metering_id {
            telemetry::held_depth(&self.parts.plan, &item, self.held.depth(m));
        }
        Ok(None)
    }
}

/// The admin API's view of an item; `spool` says where its bytes are kept in the data dir.
pub(crate) fn row(item: &Item) -> serde_json::Value {
    serde_json::json!({
        "id": item.id,
        "state": item.state.as_str(),
        "partner": item.partner,
        "sender": item.sender,
        "receiver": item.receiver,
        "control_number": item.control_number,
        "document": item.document,
        "route": item.route,
        "metering_id": item.metering_id,
        "weight": item.weight,
        "received_at": rfc3339(item.received_at),
        "next_attempt_at": item.next_attempt_at.map(rfc3339),
        "held_at": item.held_at.map(rfc3339),
        "delivered_at": item.delivered_at.map(rfc3339),
        "duplicate_of": item.duplicate_of,
        "attempts": item.attempts,
        "reason": item.reason,
        "spool": {
            "file": format!("spool/{}.edi", item.spool_file),
            "start": item.start,
            "end": item.end,
        },
    })
}
