//! The gateway under test: its `[gateway]` table (from the scenario or a config file), the
//! scenario's partners added, a `--sweep` value applied, and what a simulation must replace
//! (landing directories, acknowledgement and delivery targets, a remote quota service).

use std::path::Path;

use tollgate_gateway::GatewayConfig;

use crate::scenario::{InputError, Scenario, toml_error};

/// `--sweep ROUTE.KEY=v1,v2,…`: one run per value of a route's numeric key.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// The route's name.
    pub route: String,
    /// The key (`limit`, `interval`, …).
    pub key: String,
    /// The values, in order.
    pub values: Vec<i64>,
}

impl std::str::FromStr for Sweep {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let usage = || {
            format!(
                "--sweep {s:?}: expected ROUTE.KEY=v1,v2,… (e.g. ShipmentStatus.limit=500,1000)"
            )
        };
        let (lhs, rhs) = s.split_once('=').ok_or_else(usage)?;
        let (route, key) = lhs.rsplit_once('.').ok_or_else(usage)?;
        if route.is_empty() || key.is_empty() {
            return Err(usage());
        }
        let values = rhs
            .split(',')
            .map(|v| {
                v.trim().parse::<i64>().map_err(|_| format!("--sweep: {v:?} is not a whole number"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if values.is_empty() || values.len() > 16 {
            return Err(format!("--sweep: give 1 to 16 values, not {}", values.len()));
        }
        Ok(Sweep { route: route.to_owned(), key: key.to_owned(), values })
    }
}

/// The `[gateway]` table: `--config FILE`'s when given, else the scenario's own.
pub fn gateway_table(
    s: &Scenario,
    scenario_file: &str,
    config: Option<&Path>,
) -> Result<toml::Table, InputError> {
    match config {
        Some(path) => {
            let file = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|e| InputError {
                file: file.clone(),
                line: 0,
                field: "(file)".into(),
                message: format!("cannot read: {e}"),
            })?;
            let mut doc: toml::Table =
                toml::from_str(&text).map_err(|e| toml_error(&file, &text, &e))?;
            match doc.remove("gateway") {
                Some(toml::Value::Table(t)) => {
                    // Checked here, with positions in the file, before anything is changed.
                    let section = toml::to_string(&t).unwrap_or_default();
                    toml::from_str::<GatewayConfig>(&section).map_err(|e| InputError {
                        file: file.clone(),
                        line: 0,
                        field: format!("gateway.{}", toml_error(&file, &section, &e).field),
                        message: e.message().trim().to_owned(),
                    })?;
                    Ok(t)
                }
                _ => Err(InputError {
                    file,
                    line: 0,
                    field: "gateway".into(),
                    message: "no [gateway] section".into(),
                }),
            }
        }
        None => s.gateway.clone().ok_or_else(|| InputError {
            file: scenario_file.to_owned(),
            line: 0,
            field: "gateway".into(),
            message: "no [gateway] table: add one (routes and limits) or pass --config".into(),
        }),
    }
}

/// Applies `value` of `sweep` to the table; an error when the route is not there.
pub(crate) fn apply_sweep(
    table: &mut toml::Table,
    sweep: &Sweep,
    value: i64,
) -> Result<(), String> {
    let routes = table.get_mut("route").and_then(|r| r.as_array_mut());
    let route = routes.and_then(|rs| {
        rs.iter_mut()
            .filter_map(|r| r.as_table_mut())
            .find(|r| r.get("name").and_then(|n| n.as_str()) == Some(sweep.route.as_str()))
    });
    let Some(route) = route else {
        return Err(format!("--sweep: no [[gateway.route]] named {:?}", sweep.route));
    };
    route.insert(sweep.key.clone(), toml::Value::Integer(value));
    Ok(())
}

/// The limit of each route (name, limit, interval, unit), for the report.
pub fn limits(table: &toml::Table) -> Vec<(String, i64, i64, String)> {
    let Some(routes) = table.get("route").and_then(|r| r.as_array()) else { return Vec::new() };
    routes
        .iter()
        .filter_map(|r| r.as_table())
        .map(|r| {
            let s = |k: &str| r.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
            let i = |k: &str, d: i64| r.get(k).and_then(|v| v.as_integer()).unwrap_or(d);
            (s("name"), i("limit", 0), i("interval", 1), s("unit"))
        })
        .collect()
}

/// The config the simulation starts: the scenario's partners added to `[[partner]]` where
/// their sender id is missing, no landing directory, every route delivering to `backend`,
/// acknowledgements into `acks`, and the embedded engine (a remote quota service is replaced
/// by the engine with the same limits). Returns the notes to print about what was replaced.
pub(crate) fn prepare(
    s: &Scenario,
    mut table: toml::Table,
    backend: &Path,
    acks: &Path,
) -> Result<(GatewayConfig, Vec<String>), String> {
    let mut notes = Vec::new();
    table.remove("inbound");
    table.remove("deliver_ca_file");
    if table.contains_key("acks") {
        table.insert("acks".into(), toml::Value::String(acks.display().to_string()));
    }
    if let Some(toml::Value::Table(q)) = table.get_mut("quota")
        && q.get("mode").and_then(|m| m.as_str()) == Some("remote")
    {
        notes.push("the remote quota service is replaced by the embedded engine".to_owned());
        q.clear();
    }
    let partners = table.entry("partner").or_insert_with(|| toml::Value::Array(Vec::new()));
    let Some(partners) = partners.as_array_mut() else {
        return Err("gateway.partner is not an array of tables".into());
    };
    let known: Vec<String> = partners
        .iter()
        .filter_map(|p| p.get("ids").and_then(|i| i.as_array()))
        .flatten()
        .filter_map(|i| i.as_str().map(str::to_owned))
        .collect();
    for p in &s.partners {
        let sender = p.sender();
        if known.contains(&sender) {
            continue;
        }
        let mut t = toml::Table::new();
        t.insert("name".into(), toml::Value::String(p.name.get_ref().clone()));
        t.insert("ids".into(), toml::Value::Array(vec![toml::Value::String(sender)]));
        partners.push(toml::Value::Table(t));
    }
    if let Some(routes) = table.get_mut("route").and_then(|r| r.as_array_mut()) {
        for r in routes.iter_mut().filter_map(|r| r.as_table_mut()) {
            let target = format!("dir:{}", backend.display());
            r.insert("deliver".into(), toml::Value::String(target));
            // Credentials for the real target: neither needed nor read (their files may not
            // be on this machine).
            r.remove("delivery");
        }
    }
    let text = toml::to_string(&table).map_err(|e| format!("gateway config: {e}"))?;
    let config: GatewayConfig =
        toml::from_str(&text).map_err(|e| format!("gateway config: {}", e.message().trim()))?;
    config.plan().map_err(|e| format!("gateway config: {e}"))?;
    Ok((config, notes))
}
