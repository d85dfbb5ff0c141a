//! `tollgate-policy`: the one decision path every face of Tollgate goes through.
//!
//! A caller (the header API, Envoy's RLS, a gateway route, the simulator) says what it asks
//! for a metering id ([`Asked`]); the `[[policy]]` set in force ([`PolicySet`], shared through
//! a [`PolicyHandle`]) completes or overrides it into the spec in force ([`Resolved`], which
//! says whose limit it is); a [`Decider`] counts the weight on the store and applies
//! `store_unavailable`, and answers one [`Verdict`] with one [`DecisionOutcome`]. Faces map
//! these types at their edge (problem+json, gRPC status, a held item) and never mirror them.
//!
//! No HTTP here: the crate depends on the engine (`tollgate-quota`) only.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]
#![warn(unreachable_pub)]

mod decide;
mod rule;
mod set;

pub use decide::{DecideError, Decider, DecisionOutcome, Transport, Verdict};
pub use rule::{GlobPattern, MAX_POLICY_LIMIT, PolicyMode, PolicyRule, check_rule};
pub use set::{Asked, AskedPart, LimitSource, PolicyHandle, PolicySet, ResolveError, Resolved};
