//! The policy set in force, and how it completes what a caller asked into the spec a counter
//! is checked against ([`PolicySet::resolve`]): the same for the header API, Envoy's RLS, the
//! gateway's routes, the simulator and the console.
//!
//! Invariants:
//! - **First match wins.** Rules are tried in file order; only the first whose glob matches
//!   the id applies.
//! - **Asked beats policy, unless `override`.** Without `override` a policy fills only what
//!   the caller left out; with it, what the policy sets wins.
//! - **The source is told.** [`Resolved::source`] says whose limit is in force, so every face
//!   can show it.

use std::sync::{Arc, RwLock};

use jiff::Timestamp;
use serde::Serialize;
use tollgate_quota::{MeteringId, QuotaSpec, SpecError, TimeUnit, WindowKind};

use crate::rule::{PolicyMode, PolicyRule};

/// What a caller asked for, before policies: each part `None` when the caller left it to
/// the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Asked {
    /// Units per window.
    pub limit: Option<u64>,
    /// Window length in units (never 0).
    pub interval: Option<u32>,
    /// The window's unit.
    pub unit: Option<TimeUnit>,
    /// How windows are laid out.
    pub window: Option<WindowKind>,
    /// The calendar anchor.
    pub start: Option<Timestamp>,
}

impl Asked {
    /// Everything a spec holds, as a gateway route or a simulated one asks it.
    pub fn spec(spec: &QuotaSpec) -> Asked {
        Asked {
            limit: Some(spec.limit),
            interval: Some(spec.interval),
            unit: Some(spec.unit),
            window: Some(spec.window),
            start: spec.start,
        }
    }
}

/// Who set the limit in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LimitSource {
    /// The caller's request (`quota-limit`, an RLS rule).
    Request,
    /// The gateway route.
    Route,
    /// A `[[policy]]`.
    Policy,
}

impl LimitSource {
    /// The lowercase name shown to people and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::Route => "route",
            Self::Policy => "policy",
        }
    }
}

/// The spec a request is checked against, after merging what was asked with the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The quota to check.
    pub spec: QuotaSpec,
    /// Enforce or shadow (enforce when no policy matched).
    pub mode: PolicyMode,
    /// The glob of the policy that matched, if any.
    pub policy: Option<String>,
    /// Whose limit is in force.
    pub source: LimitSource,
}

/// The part of a request that made the merged spec invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AskedPart {
    /// The limit.
    Limit,
    /// The interval.
    Interval,
    /// The unit.
    Unit,
    /// The calendar anchor.
    Start,
}

/// Why what was asked, with the policies, makes no spec. Nothing is counted for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// No limit was asked, and no policy supplies one.
    #[error("quota-limit is required: no server policy supplies a limit for {0}")]
    MissingLimit(MeteringId),
    /// No unit was asked, and no policy supplies one.
    #[error("quota-timeunit is required: no server policy supplies a unit for {0}")]
    MissingUnit(MeteringId),
    /// The merged spec is invalid; `part` is what the caller asked that made it so.
    #[error("{error}")]
    Spec {
        /// The offending part of the request.
        part: AskedPart,
        /// What the caller sent for it, if anything.
        value: Option<String>,
        /// Why the spec is invalid.
        error: SpecError,
    },
}

/// An ordered, validated list of policies; the first match wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicySet {
    rules: Vec<PolicyRule>,
}

impl PolicySet {
    /// A set of already-validated rules (every [`PolicyRule`] is valid once deserialized).
    pub fn new(rules: Vec<PolicyRule>) -> Self {
        Self { rules }
    }

    /// The rules, in matching order.
    pub fn rules(&self) -> &[PolicyRule] {
        &self.rules
    }

    /// The first rule whose glob matches `id`.
    pub fn find(&self, id: &str) -> Option<&PolicyRule> {
        self.rules.iter().find(|r| r.pattern.is_match(id))
    }

    /// Merges what was asked for `id` with the first matching policy into a [`QuotaSpec`]
    /// (see the module invariants). `asker` is whose the asked values are: the request's or
    /// a route's.
    pub fn resolve(
        &self,
        id: &MeteringId,
        asked: &Asked,
        asker: LimitSource,
    ) -> Result<Resolved, ResolveError> {
        fn pick<T>(asked: Option<T>, policy: Option<T>, over: bool) -> Option<T> {
            if over { policy.or(asked) } else { asked.or(policy) }
        }
        let rule = self.find(id.as_str());
        let over = rule.is_some_and(|r| r.override_headers);
        let policy_limit = rule.and_then(|r| r.limit);
        let limit = pick(asked.limit, policy_limit, over)
            .ok_or_else(|| ResolveError::MissingLimit(id.clone()))?;
        let source = if policy_limit.is_some() && (over || asked.limit.is_none()) {
            LimitSource::Policy
        } else {
            asker
        };
        let unit = pick(asked.unit, rule.and_then(|r| r.unit), over)
            .ok_or_else(|| ResolveError::MissingUnit(id.clone()))?;
        let interval =
            pick(asked.interval, rule.and_then(|r| r.interval.map(|n| n.get())), over).unwrap_or(1);
        let window =
            pick(asked.window, rule.and_then(|r| r.window), over).unwrap_or(WindowKind::Calendar);
        let spec = QuotaSpec { limit, interval, unit, window, start: asked.start }
            .validated()
            .map_err(|error| {
                // Policies are checked when loaded, so a window too long comes from the caller:
                // the interval if it was the one used, else the unit.
                let (part, value) = match error {
                    SpecError::WindowTooLong { .. } if asked.interval == Some(interval) => {
                        (AskedPart::Interval, Some(interval.to_string()))
                    }
                    SpecError::WindowTooLong { .. } => {
                        (AskedPart::Unit, asked.unit.map(|u| u.as_str().to_owned()))
                    }
                    _ => (AskedPart::Start, asked.start.map(|s| s.to_string())),
                };
                ResolveError::Spec { part, value, error }
            })?;
        Ok(Resolved {
            spec,
            mode: rule.map_or(PolicyMode::Enforce, |r| r.mode),
            policy: rule.map(|r| r.pattern.as_str().to_owned()),
            source,
        })
    }
}

/// The policy set in force, shared by every face: the server swaps it whole (a reload, `PUT
/// /v1/policies`) and each decision reads the set of that moment. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct PolicyHandle(Arc<RwLock<Arc<PolicySet>>>);

impl PolicyHandle {
    /// A handle starting at `set`.
    pub fn new(set: PolicySet) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(set))))
    }

    /// The set in force now.
    pub fn current(&self) -> Arc<PolicySet> {
        match self.0.read() {
            Ok(g) => Arc::clone(&g),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Puts `set` in force for every later decision.
    pub fn install(&self, set: PolicySet) {
        match self.0.write() {
            Ok(mut g) => *g = Arc::new(set),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(set),
        }
    }
}

#[cfg(test)]
mod tests;
