//! The Tollgate quota engine.
//!
//! A [`QuotaSpec`] says how many units an identifier ([`MeteringId`]) may consume per window;
//! a [`Store`] keeps the counters and answers every check with a [`Decision`]. The semantics
//! follow the Apigee / SAP API Management Quota policy (calendar, flexi and rolling windows,
//! weighted messages), with the admission rule `used + weight <= limit` kept exactly, even
//! under concurrency. This crate knows nothing of HTTP.
//!
//! Every store decides through one synchronous core, [`Counters`]; the stores differ only in
//! where counters survive ([`store::MemoryStore`], [`store::EmbeddedStore`] on a redb file,
//! [`store::RedisStore`] shared by many instances).
//!
//! ```
//! use tollgate_quota::{MeteringId, Outcome, QuotaSpec, TimeUnit, store::MemoryStore};
//!
//! let store = MemoryStore::new();
//! let carrier = MeteringId::new("ShipmentStatus:CarrierXYZ")?;
//! let daily = QuotaSpec::new(1000, 24, TimeUnit::Hour)?;
//! for _ in 0..20 {
//!     assert!(store.check_now(&carrier, &daily, 50).allowed());
//! }
//! let d = store.check_now(&carrier, &daily, 50);
//! assert_eq!((d.outcome, d.used, d.exceed_count), (Outcome::Exceeded, 1000, 1));
//! assert!(d.retry_after().is_some());
//! # Ok::<(), tollgate_quota::SpecError>(())
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]
#![deny(missing_docs)]
#![warn(unreachable_pub)]

mod clock;
mod counter;
mod decision;
mod metering_id;
pub mod rate_headers;
mod spec;
pub mod store;
mod window;

pub use clock::{Clock, ManualClock, SystemClock};
pub use counter::Counters;
pub use decision::{Counted, Decision, GivenBack, Outcome};
pub use metering_id::MeteringId;
pub use spec::{
    CounterShape, MAX_WINDOW_YEARS, QuotaSpec, SpecError, TimeUnit, WindowKind, check_start,
};
pub use store::{
    AnyStore, CounterInfo, CounterListing, CounterPage, CounterPosition, PositionError, Seen,
    Store, StoreError, StoreHealth,
};
pub use window::{ROLLING_BUCKETS, RollingLayout, Window};
