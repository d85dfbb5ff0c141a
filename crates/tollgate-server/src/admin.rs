//! The quota service's admin endpoints, one module per concept: [`counters`] (live counters)
//! and [`policies`] (the policy set). Who may call them is decided by
//! [`tollgate_http::AccessGuard`].

pub mod counters;
pub mod policies;

pub use counters::{CounterQuery, list_counters, reset_counter};
pub use policies::{get_policies, put_policies};
