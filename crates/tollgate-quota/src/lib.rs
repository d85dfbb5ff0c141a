//! The Tollgate quota engine.
//!
//! A [`QuotaSpec`] says how many units an identifier ([`MeteringId`]) may consume per window;
//! a [`Store`] keeps the counters and answers every check with a [`Decision`]. The semantics
//! follow the Apigee / SAP API Management Quota policy (calendar, flexi and rolling windows,
//! weighted messages), with the admission rule `used + weight <= limit` kept exactly, even
//! under concurrency. This crate knows nothing of HTTP.
#![forbid(unsafe_code)]

pub mod clock;
pub mod counter;
pub mod decision;
pub mod spec;
pub mod store;
pub mod window;

pub use clock::{Clock, ManualClock, SystemClock};
pub use counter::Counters;
pub use decision::{Decision, Outcome};
pub use spec::{MeteringId, QuotaSpec, SpecError, TimeUnit, WindowKind};
pub use store::{AnyStore, CounterInfo, Store, StoreError};
