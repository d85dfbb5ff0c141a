//! The quota service's admin endpoints, one module per concept: [`counters`] (live counters)
//! and [`policies`] (the policy set). Who may call them is decided by
//! [`tollgate_http::AccessGuard`].

pub(crate) mod counters;
pub(crate) mod policies;

pub(crate) use counters::{list_counters, reset_counter};
pub(crate) use policies::{get_policies, put_policies};
