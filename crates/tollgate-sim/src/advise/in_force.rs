//! The limit in force for a proposal: the route of its document and the limit `tollgate serve`
//! would apply to the partner's metering id (the route's, or an overriding `[[policy]]`'s),
//! read from a config file for `tollgate advise --config`.

use std::path::Path;

use super::Proposal;

/// The limit a config puts on one partner's document today: its route's, or a `[[policy]]`'s
/// that matches the metering id, resolved as `tollgate serve` resolves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InForce {
    /// The metering id the route gives the partner.
    pub metering_id: String,
    /// Units per window.
    pub limit: u64,
    /// The window's length in `unit`s.
    pub interval: u32,
    /// The window's unit.
    pub unit: tollgate_quota::TimeUnit,
    /// `route` or `policy`.
    pub source: &'static str,
}

impl InForce {
    /// The limit per hour, for a side-by-side with the proposal (months count 30 days).
    pub(super) fn per_hour(&self) -> f64 {
        let secs =
            self.unit.fixed_seconds().unwrap_or(30 * 86_400) as f64 * f64::from(self.interval);
        self.limit as f64 * 3600.0 / secs
    }
}

/// Fills each proposal's route and limit in force from the `[gateway]` and `[[policy]]`
/// sections of the config file at `path`.
pub(super) fn read_in_force(path: &Path, ps: &mut [Proposal]) -> Result<(), String> {
    use tollgate_policy::{Asked, LimitSource, PolicyRule, PolicySet};
    let file = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{file}: cannot read: {e}"))?;
    #[derive(serde::Deserialize)]
    struct Sections {
        gateway: Option<toml::Table>,
        #[serde(default)]
        policy: Vec<PolicyRule>,
    }
    let sections: Sections = toml::from_str(&text).map_err(|e| format!("{file}: {e}"))?;
    let gateway = sections.gateway.ok_or_else(|| format!("{file}: no [gateway] section"))?;
    // Read back from text, as `tollgate serve` reads it (its values carry their positions).
    let section = toml::to_string(&gateway).map_err(|e| format!("{file}: [gateway]: {e}"))?;
    let gateway: tollgate_gateway::GatewayConfig =
        toml::from_str(&section).map_err(|e| format!("{file}: [gateway]: {e}"))?;
    let plan = gateway.plan().map_err(|e| format!("{file}: {e}"))?;
    let policies = PolicySet::new(sections.policy);
    for p in ps {
        let Some(route) = plan.route_for(&p.document) else { continue };
        let id = route.metering_id(&p.partner);
        let Ok(resolved) = policies.resolve(&id, &Asked::spec(&route.spec), LimitSource::Route)
        else {
            continue;
        };
        p.route.clone_from(&route.name);
        p.in_force = Some(InForce {
            metering_id: id.as_str().to_owned(),
            limit: resolved.spec.limit,
            interval: resolved.spec.interval,
            unit: resolved.spec.unit,
            source: match resolved.source {
                LimitSource::Policy => "policy",
                _ => "route",
            },
        });
    }
    Ok(())
}
