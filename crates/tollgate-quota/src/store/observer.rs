//! The decision observer: one hook that sees every decision an [`AnyStore`](super::AnyStore)
//! makes, whoever asked (the HTTP service, the gateway's in-process metering, gRPC). The server
//! plugs its usage history in here; the engine knows nothing of what it does with them.
//!
//! Invariants:
//! - **Set once.** A store has at most one observer for its lifetime ([`ObserverSlot::set`]
//!   refuses a second), so a decision is never reported twice nor to a stale observer.
//! - **Cheap when unset.** A store without an observer pays one atomic load per decision.
//! - **Never fails a decision.** The observer returns nothing and is called after the decision
//!   is made; it must not block (it runs on the decision's task).

use std::sync::{Arc, OnceLock};

use crate::decision::Decision;

/// Sees every decision of the store it is attached to, after it is made.
pub trait DecisionObserver: Send + Sync + 'static {
    /// Called once per decision (admitted or refused); must be quick and must not block.
    fn decided(&self, decision: &Decision);
}

/// Where a store keeps its observer (see the module invariants).
#[derive(Default)]
pub struct ObserverSlot(OnceLock<Arc<dyn DecisionObserver>>);

impl ObserverSlot {
    /// Attaches `observer`; `false` when one is already attached (it stays).
    pub fn set(&self, observer: Arc<dyn DecisionObserver>) -> bool {
        self.0.set(observer).is_ok()
    }

    /// Reports `decision` to the observer, if any.
    #[inline]
    pub fn report(&self, decision: &Decision) {
        if let Some(o) = self.0.get() {
            o.decided(decision);
        }
    }
}
