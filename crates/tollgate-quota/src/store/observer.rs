//! The decision observer: one hook that sees every decision an [`AnyStore`](super::AnyStore)
//! makes, whoever asked (the HTTP service, the gateway's in-process metering, gRPC), and the
//! units a caller withheld without a new decision ([`Withheld`]: the gateway's held and
//! duplicate items). The server plugs its usage history in here; the engine knows nothing of
//! what it does with them.
//!
//! Invariants:
//! - **Set once.** A store has at most one observer for its lifetime ([`ObserverSlot::set`]
//!   refuses a second), so a decision is never reported twice nor to a stale observer.
//! - **Cheap when unset.** A store without an observer pays one atomic load per decision, and
//!   per withheld report.
//! - **Never fails a decision.** The observer returns nothing and is called after the decision
//!   is made; it must not block (it runs on the decision's task).
//! - **Decisions are reported by the store, withheld units by their caller.** The store sees
//!   no decision for units kept back (an item waiting behind held ones, a duplicate), so the
//!   caller reports them once, through [`AnyStore::withheld`](super::AnyStore::withheld).

use std::sync::{Arc, OnceLock};

use crate::decision::Decision;
use crate::metering_id::MeteringId;

/// Why units were withheld without a decision admitting them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Withheld {
    /// Held over quota: waiting for the window to free enough (reported once per item, when
    /// it first becomes held, not at each re-check).
    Held,
    /// A duplicate of something sent before: never metered nor delivered.
    Duplicate,
}

/// Sees every decision of the store it is attached to, after it is made.
pub trait DecisionObserver: Send + Sync + 'static {
    /// Called once per decision on `id` (admitted or refused); must be quick and must not
    /// block.
    fn decided(&self, id: &MeteringId, decision: &Decision);

    /// Called once per report of `weight` units of `id` withheld as `kind` (see [`Withheld`]);
    /// must be quick and must not block. Ignored unless the observer keeps them.
    fn withheld(&self, id: &MeteringId, kind: Withheld, weight: u64) {
        let _ = (id, kind, weight);
    }
}

/// Where a store keeps its observer (see the module invariants).
#[derive(Default)]
pub struct ObserverSlot(OnceLock<Arc<dyn DecisionObserver>>);

impl ObserverSlot {
    /// Attaches `observer`; `false` when one is already attached (it stays).
    pub fn set(&self, observer: Arc<dyn DecisionObserver>) -> bool {
        self.0.set(observer).is_ok()
    }

    /// Reports `decision` on `id` to the observer, if any.
    #[inline]
    pub fn report(&self, id: &MeteringId, decision: &Decision) {
        if let Some(o) = self.0.get() {
            o.decided(id, decision);
        }
    }

    /// Reports `weight` units of `id` withheld as `kind` to the observer, if any.
    #[inline]
    pub fn report_withheld(&self, id: &MeteringId, kind: Withheld, weight: u64) {
        if let Some(o) = self.0.get() {
            o.withheld(id, kind, weight);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::spec::{QuotaSpec, TimeUnit};
    use crate::store::{AnyStore, MemoryStore, Store};

    /// Writes down what it is told, in order.
    #[derive(Default)]
    struct Notes(Mutex<Vec<String>>);

    impl DecisionObserver for Notes {
        fn decided(&self, id: &MeteringId, d: &Decision) {
            self.0.lock().unwrap().push(format!("{id} {:?} {}", d.outcome, d.weight));
        }
        fn withheld(&self, id: &MeteringId, kind: Withheld, weight: u64) {
            self.0.lock().unwrap().push(format!("{id} {kind:?} {weight}"));
        }
    }

    /// Keeps decisions only: the provided `withheld` ignores the rest.
    struct DecisionsOnly(Mutex<u32>);

    impl DecisionObserver for DecisionsOnly {
        fn decided(&self, _: &MeteringId, _: &Decision) {
            *self.0.lock().unwrap() += 1;
        }
    }

    #[tokio::test]
    async fn decisions_and_withheld_units_reach_the_one_observer() {
        let store = AnyStore::Memory(MemoryStore::new());
        let id = MeteringId::new("S:A").unwrap();
        let spec = QuotaSpec::new(5, 1, TimeUnit::Day).unwrap();
        // Nothing attached: reports go nowhere.
        store.withheld(&id, Withheld::Held, 9);
        let notes = Arc::new(Notes::default());
        assert!(store.observe(notes.clone()));
        assert!(!store.observe(Arc::new(Notes::default())), "set once");
        store.check(&id, &spec, 4).await.unwrap();
        store.check(&id, &spec, 4).await.unwrap();
        store.withheld(&id, Withheld::Held, 4);
        store.withheld(&id, Withheld::Duplicate, 2);
        assert_eq!(
            *notes.0.lock().unwrap(),
            ["S:A Allowed 4", "S:A Exceeded 4", "S:A Held 4", "S:A Duplicate 2"]
        );

        let other = AnyStore::Memory(MemoryStore::new());
        let only = Arc::new(DecisionsOnly(Mutex::new(0)));
        assert!(other.observe(only.clone()));
        other.withheld(&id, Withheld::Duplicate, 1);
        other.check(&id, &spec, 1).await.unwrap();
        assert_eq!(*only.0.lock().unwrap(), 1);
    }
}
