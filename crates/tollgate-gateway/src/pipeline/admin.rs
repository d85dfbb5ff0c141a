//! The admin API's operations on the pipeline (retry, release, purge, look up), applied by
//! the pipeline task itself like every other event, and the JSON view of an item.

use super::*;

impl Pipeline {
    pub(super) async fn admin(
        &mut self,
        id: &str,
        op: AdminOp,
        batch: &mut Batch,
    ) -> Result<Option<Item>, AdminError> {
        let item = match self.live.get(id) {
            Some(i) => i.clone(),
            None => {
                let spool = self.parts.spool.clone();
                let key = id.to_owned();
                tokio::task::spawn_blocking(move || spool.item(&key))
                    .await
                    .map_err(|e| AdminError::Spool(e.to_string()))?
                    .map_err(|e| AdminError::Spool(e.to_string()))?
                    .ok_or(AdminError::NotFound)?
            }
        };
        match op {
            AdminOp::Purge => {
                if let Some(m) = &item.metering_id {
                    self.held.remove(m, id);
                }
                self.live.remove(id);
                if let Some(lane) = self.lanes.finish(id) {
                    self.start_lane(&lane);
                }
                batch.change.delete.push(id.to_owned());
                if item.state != State::Delivered {
                    self.release_file(&item.spool_file, batch);
                }
                Ok(None)
            }
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
                    self.live.insert(id.to_owned(), revived);
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
                    .cloned()
                    .or_else(|| batch.change.put.iter().rev().find(|i| i.id == id).cloned()))
            }
        }
    }
}

/// The admin API's view of an item; `spool` says where its bytes are kept in the data dir.
pub fn row(item: &Item) -> serde_json::Value {
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
        "attempts": item.attempts,
        "reason": item.reason,
        "spool": {
            "file": format!("spool/{}.edi", item.spool_file),
            "start": item.start,
            "end": item.end,
        },
    })
}
