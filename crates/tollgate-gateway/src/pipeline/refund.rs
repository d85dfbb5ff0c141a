//! Refunds: a route with `refund_unsent = true` gives back the units the embedded store counted
//! for an interchange that is then purged, or dies, before its target took it — so a partner's
//! window is charged only for what was delivered. Any route gives back the units of a split
//! that could not be written: nothing was sent, and the item is metered again. Units a refund
//! gives back let the head of the partner's held group be metered again at once.
//!
//! Invariants:
//! - **At most once per admission.** The charge (a split part's: one per transaction) leaves
//!   the item when it is refunded (a dead item is written without it; a purged one is gone),
//!   and an operator's retry meters it again with a new charge.
//! - **Never below zero, never another window's.** The store subtracts only from the window
//!   the units were counted in, while it still counts (`Store::give_back`).
//! - **Off the pipeline's path.** The give-back runs in a task of its own; a failure is logged
//!   and counted, never retried (the units then stay counted: the error is on the side of
//!   refusing).

use super::*;
use crate::item::Charge;

impl Pipeline {
    /// Takes `item`'s charge and, when its route refunds unsent interchanges, gives its units
    /// back in the background.
    pub(super) fn refund_unsent(&self, item: &mut Item) {
        let mut charges = std::mem::take(&mut item.part_charges);
        charges.extend(item.charge.take().map(|c| (c, item.weight)));
        let refunds = item
            .route
            .as_ref()
            .and_then(|r| self.parts.plan.routes.iter().find(|x| &x.name == r))
            .is_some_and(|r| r.refund_unsent);
        let Some(id) = item.metering_id.clone().filter(|_| refunds) else { return };
        let wake = self.events.clone();
        self.give_back_then(id, item.id.clone(), charges, move |id| {
            let _ = wake.send(Event::GivenBack { metering_id: id });
        });
    }

    /// Gives back, in the background, the units of `charges` (each with its weight) counted for
    /// `id` on behalf of item `item_id`.
    pub(super) fn give_back(&self, id: MeteringId, item_id: String, charges: Vec<(Charge, u64)>) {
        self.give_back_then(id, item_id, charges, drop);
    }

    /// [`Pipeline::give_back`], then `then(id)` once some units were given back.
    fn give_back_then(
        &self,
        id: MeteringId,
        item_id: String,
        charges: Vec<(Charge, u64)>,
        then: impl FnOnce(MeteringId) + Send + 'static,
    ) {
        if charges.is_empty() {
            return;
        }
        let parts = self.parts.clone();
        tokio::spawn(async move {
            let mut given = 0;
            for (charge, units) in charges {
                match parts.meter.give_back(&id, &charge, units).await {
                    Ok(n) => {
                        given += n;
                        metrics::counter!("tollgate_gateway_refunded_units_total").increment(n);
                        tracing::info!(item = %item_id, metering_id = %id, given_back = n, "units of an undelivered interchange given back");
                    }
                    Err(e) => {
                        metrics::counter!("tollgate_gateway_refund_errors_total").increment(1);
                        tracing::warn!(item = %item_id, metering_id = %id, error = %e, "could not give back the units of an undelivered interchange; they stay counted");
                    }
                }
            }
            if given > 0 {
                then(id);
            }
        });
    }

    /// Units were given back to `m`: the head of its held group is metered again now rather
    /// than at the time its last refusal named (a head at rest is due already).
    pub(super) fn given_back(&mut self, m: &MeteringId) {
        let now = self.parts.spool.now_ms();
        let head = self.held.head(m).and_then(|h| self.live.get_mut(h));
        if let Some(at) = head.and_then(|item| item.next_attempt_at.as_mut()) {
            *at = (*at).min(now);
        }
    }
}
