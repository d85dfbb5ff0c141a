//! A scenario: the partners and their traffic, the bursts, the backend's capacity and the
//! gateway under test, read from a TOML file. Every error names the file, the line and the
//! field (see [`InputError`]).

use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use tollgate_policy::PolicyRule;

/// Bad input (a scenario, a gateway config, a history CSV): where and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {field}: {message}")]
pub struct InputError {
    /// The file as given on the command line.
    pub file: String,
    /// 1-based line (0 when the problem is the whole file).
    pub line: usize,
    /// The field (key or column) at fault.
    pub field: String,
    /// What is wrong, with the value received.
    pub message: String,
}

impl InputError {
    /// An error at byte `offset` of `text`.
    pub fn at(file: &str, text: &str, offset: usize, field: &str, message: String) -> Self {
        Self {
            file: file.to_owned(),
            line: line_of(text, offset),
            field: field.to_owned(),
            message,
        }
    }
}

/// The 1-based line of byte `offset` in `text`.
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// The key assigned on the line holding `offset`, if that line is `key = value`.
fn key_on_line(text: &str, offset: usize) -> Option<String> {
    let start = text[..offset.min(text.len())].rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next()?;
    let (key, _) = line.split_once('=')?;
    let key = key.trim();
    (!key.is_empty() && !key.starts_with('#')).then(|| key.trim_matches('"').to_owned())
}

/// A TOML parse or type error as an [`InputError`] (the field from the message or the line).
pub(crate) fn toml_error(file: &str, text: &str, e: &toml::de::Error) -> InputError {
    let message = e.message().trim().to_owned();
    let offset = e.span().map_or(0, |s| s.start);
    let field = message
        .split('`')
        .nth(1)
        .filter(|_| message.contains("field"))
        .map(str::to_owned)
        .or_else(|| key_on_line(text, offset))
        .unwrap_or_else(|| "(syntax)".to_owned());
    let line = if e.span().is_some() { line_of(text, offset) } else { 0 };
    InputError { file: file.to_owned(), line, field, message }
}

/// Records (transactions) per interchange: a fixed number or an inclusive range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Records {
    /// Always this many.
    Fixed(u32),
    /// Uniform in `[low, high]`.
    Range([u32; 2]),
}

impl Default for Records {
    fn default() -> Self {
        Records::Fixed(1)
    }
}

impl Records {
    /// The inclusive bounds.
    pub fn bounds(self) -> (u32, u32) {
        match self {
            Records::Fixed(n) => (n, n),
            Records::Range([a, b]) => (a, b),
        }
    }
}

/// What the backend (the ERP) can absorb per hour.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CapacityUnit {
    /// Interchanges per hour.
    #[default]
    Documents,
    /// Records (the routes' weight) per hour.
    Records,
}

/// `[backend]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backend {
    /// What it absorbs per hour.
    pub capacity: toml::Spanned<u64>,
    /// `"documents"` (the default) or `"records"`.
    #[serde(default = "documents")]
    pub unit: CapacityUnit,
}

fn one_record() -> toml::Spanned<Records> {
    toml::Spanned::new(0..0, Records::Fixed(1))
}

fn zero() -> toml::Spanned<f64> {
    toml::Spanned::new(0..0, 0.0)
}

fn documents() -> CapacityUnit {
    CapacityUnit::Documents
}

/// `[[partner]]`: one sender and its ordinary traffic.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Partner {
    /// The name (as in the gateway's `[[partner]]`; added there when missing).
    pub name: toml::Spanned<String>,
    /// Sender id `QUAL:ID`; `ZZ:<NAME IN CAPITALS>` when absent.
    #[serde(default)]
    pub id: Option<toml::Spanned<String>>,
    /// Document types it sends: X12 numbers (`214`) or EDIFACT names (`IFTSTA`).
    pub documents: toml::Spanned<Vec<String>>,
    /// Mean interchanges per hour (Poisson arrivals).
    pub rate_per_hour: toml::Spanned<f64>,
    /// 24 multipliers of the rate, one per hour of the day (UTC).
    #[serde(default)]
    pub profile: Option<toml::Spanned<Vec<f64>>>,
    /// Records per interchange.
    #[serde(default = "one_record")]
    pub records: toml::Spanned<Records>,
}

impl Partner {
    /// The sender id.
    pub fn sender(&self) -> String {
        match &self.id {
            Some(id) => id.get_ref().clone(),
            None => format!("ZZ:{}", self.name.get_ref().to_uppercase()),
        }
    }
}

/// `[[burst]]`: a partner sending many interchanges in a short time.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Burst {
    /// The partner's name.
    pub partner: toml::Spanned<String>,
    /// Hours after the scenario's start.
    pub start_hours: toml::Spanned<f64>,
    /// How long it lasts, in minutes.
    pub minutes: toml::Spanned<f64>,
    /// Interchanges sent.
    pub count: toml::Spanned<u64>,
    /// The fraction that are copies of the partner's earlier interchanges (duplicates).
    #[serde(default = "zero")]
    pub copies: toml::Spanned<f64>,
    /// The fraction that are malformed (rejected by the parser).
    #[serde(default = "zero")]
    pub invalid: toml::Spanned<f64>,
    /// Records per interchange; the partner's when absent.
    #[serde(default)]
    pub records: Option<toml::Spanned<Records>>,
}

/// The whole file, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    start: Option<toml::Spanned<String>>,
    days: toml::Spanned<f64>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    bucket_minutes: Option<toml::Spanned<u32>>,
    backend: Backend,
    #[serde(default)]
    partner: Vec<Partner>,
    #[serde(default)]
    burst: Vec<Burst>,
    #[serde(default)]
    gateway: Option<toml::Table>,
    #[serde(default)]
    policy: Vec<PolicyRule>,
}

/// A validated scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// A title for the report.
    pub name: String,
    /// The virtual time the run starts at.
    pub start: jiff::Timestamp,
    /// Its length in milliseconds.
    pub length_ms: i64,
    /// The seed when `--seed` is not given.
    pub seed: u64,
    /// The charts' time step, in minutes.
    pub bucket_minutes: u32,
    /// The backend's capacity.
    pub backend: Backend,
    /// The partners.
    pub partners: Vec<Partner>,
    /// The bursts.
    pub bursts: Vec<Burst>,
    /// The inline `[gateway]` table, if any.
    pub gateway: Option<toml::Table>,
    /// `[[policy]]`: the quota service's policies, applied to the gateway's metering as
    /// `tollgate serve` applies them (an `override` beats a route's limit).
    pub policies: Vec<PolicyRule>,
    /// Partners (indices) counted as bursting though no `[[burst]]` names them (a replayed
    /// history's partners with burst hours).
    pub marked_bursting: Vec<usize>,
}

/// The longest scenario, in days (bounds memory and run time).
pub(crate) const MAX_DAYS: f64 = 400.0;
/// The most interchanges one scenario may offer (bounds memory).
pub(crate) const MAX_INTERCHANGES: u64 = 5_000_000;

impl Scenario {
    /// Reads and validates the scenario in `path`.
    pub fn load(path: &Path) -> Result<Scenario, InputError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| InputError {
            file: name.clone(),
            line: 0,
            field: "(file)".into(),
            message: format!("cannot read: {e}"),
        })?;
        Self::parse(&name, &text)
    }

    /// Parses and validates scenario `text`; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Scenario, InputError> {
        let f: File = toml::from_str(text).map_err(|e| toml_error(file, text, &e))?;
        let err = |span: Range<usize>, field: &str, message: String| {
            InputError::at(file, text, span.start, field, message)
        };
        let start = match &f.start {
            Some(s) => s.get_ref().parse::<jiff::Timestamp>().map_err(|e| {
                err(s.span(), "start", format!("{:?} is not an RFC 3339 time: {e}", s.get_ref()))
            })?,
            None => jiff::Timestamp::from_second(1_767_571_200).unwrap_or_default(),
        };
        let days = *f.days.get_ref();
        if !(days > 0.0 && days <= MAX_DAYS) {
            return Err(err(f.days.span(), "days", format!("{days} is not in (0, {MAX_DAYS}]")));
        }
        let bucket_minutes = match &f.bucket_minutes {
            Some(b) if !(1..=1440).contains(b.get_ref()) => {
                return Err(err(
                    b.span(),
                    "bucket_minutes",
                    format!("{} is not in 1..=1440", b.get_ref()),
                ));
            }
            Some(b) => *b.get_ref(),
            None => 60,
        };
        if *f.backend.capacity.get_ref() == 0 {
            return Err(err(f.backend.capacity.span(), "capacity", "0 is not a capacity".into()));
        }
        if f.partner.is_empty() {
            return Err(InputError {
                file: file.into(),
                line: 0,
                field: "partner".into(),
                message: "no [[partner]]: a scenario needs at least one".into(),
            });
        }
        let mut offered = 0f64;
        for (i, p) in f.partner.iter().enumerate() {
            let n = p.name.get_ref();
            if n.is_empty() || !n.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
                return Err(err(
                    p.name.span(),
                    "name",
                    format!("{n:?}: use letters, digits, '-', '_' or '.'"),
                ));
            }
            if f.partner[..i].iter().any(|q| q.name.get_ref() == n) {
                return Err(err(p.name.span(), "name", format!("partner {n:?} is listed twice")));
            }
            let sender = p.sender();
            let valid_id = sender.split_once(':').is_some_and(|(q, id)| {
                !q.is_empty()
                    && q.len() <= 4
                    && !id.is_empty()
                    && id.len() <= 15
                    && (q.chars().chain(id.chars())).all(|c| c.is_ascii_alphanumeric())
            });
            if !valid_id {
                let span = p.id.as_ref().map_or(p.name.span(), toml::Spanned::span);
                return Err(err(
                    span,
                    "id",
                    format!("{sender:?} is not QUAL:ID (letters and digits, ID at most 15)"),
                ));
            }
            let docs = p.documents.get_ref();
            if docs.is_empty()
                || docs.iter().any(|d| {
                    let x12 = d.len() == 3 && d.chars().all(|c| c.is_ascii_digit());
                    let edifact =
                        (3..=6).contains(&d.len()) && d.chars().all(|c| c.is_ascii_uppercase());
                    !(x12 || edifact)
                })
            {
                return Err(err(
                    p.documents.span(),
                    "documents",
                    format!("{docs:?}: list X12 numbers (\"214\") or EDIFACT names (\"IFTSTA\")"),
                ));
            }
            let rate = *p.rate_per_hour.get_ref();
            if !(rate.is_finite() && (0.0..=1_000_000.0).contains(&rate)) {
                return Err(err(
                    p.rate_per_hour.span(),
                    "rate_per_hour",
                    format!("{rate} is not in 0..=1000000"),
                ));
            }
            if let Some(profile) = &p.profile {
                let v = profile.get_ref();
                if v.len() != 24 || v.iter().any(|m| !(m.is_finite() && *m >= 0.0 && *m <= 100.0)) {
                    return Err(err(
                        profile.span(),
                        "profile",
                        format!("{} value(s): give 24 multipliers, each in 0..=100", v.len()),
                    ));
                }
            }
            check_records(&p.records).map_err(|m| err(p.records.span(), "records", m))?;
            offered += rate * 24.0 * days * 2.0;
        }
        for b in &f.burst {
            let n = b.partner.get_ref();
            if !f.partner.iter().any(|p| p.name.get_ref() == n) {
                return Err(err(
                    b.partner.span(),
                    "partner",
                    format!("{n:?} is not a [[partner]] of this scenario"),
                ));
            }
            let s = *b.start_hours.get_ref();
            if !(s.is_finite() && s >= 0.0 && s < days * 24.0) {
                return Err(err(
                    b.start_hours.span(),
                    "start_hours",
                    format!("{s} is not within the scenario (0 to {} hours)", days * 24.0),
                ));
            }
            let m = *b.minutes.get_ref();
            if !(m.is_finite() && m > 0.0 && m <= days * 1440.0) {
                return Err(err(b.minutes.span(), "minutes", format!("{m} is not a duration")));
            }
            for (field, v) in [("copies", &b.copies), ("invalid", &b.invalid)] {
                let x = *v.get_ref();
                if !(0.0..=1.0).contains(&x) {
                    return Err(err(v.span(), field, format!("{x} is not a fraction in 0..=1")));
                }
            }
            if b.copies.get_ref() + b.invalid.get_ref() > 1.0 {
                return Err(err(
                    b.invalid.span(),
                    "invalid",
                    "copies + invalid is more than 1".into(),
                ));
            }
            if let Some(r) = &b.records {
                check_records(r).map_err(|m| err(r.span(), "records", m))?;
            }
            offered += *b.count.get_ref() as f64;
        }
        if offered > MAX_INTERCHANGES as f64 {
            return Err(InputError {
                file: file.into(),
                line: 0,
                field: "rate_per_hour".into(),
                message: format!(
                    "about {offered:.0} interchanges at most; a scenario may offer at most {MAX_INTERCHANGES}"
                ),
            });
        }
        Ok(Scenario {
            name: f.name.unwrap_or_else(|| "Scenario".to_owned()),
            start,
            length_ms: (days * 86_400_000.0) as i64,
            seed: f.seed.unwrap_or(1),
            bucket_minutes,
            backend: f.backend,
            partners: f.partner,
            bursts: f.burst,
            gateway: f.gateway,
            policies: f.policy,
            marked_bursting: Vec::new(),
        })
    }

    /// True when the partner at `index` has a burst.
    pub fn bursts_for(&self, index: usize) -> bool {
        let name = self.partners[index].name.get_ref();
        self.marked_bursting.contains(&index)
            || self.bursts.iter().any(|b| b.partner.get_ref() == name)
    }
}

fn check_records(r: &toml::Spanned<Records>) -> Result<(), String> {
    let (a, b) = r.get_ref().bounds();
    if a == 0 || a > b || b > 10_000 {
        return Err(format!("[{a}, {b}]: give n or [low, high] with 1 <= low <= high <= 10000"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"
days = 1
[backend]
capacity = 100
[[partner]]
name = "A"
documents = ["214"]
rate_per_hour = 10
"#;

    #[test]
    fn a_minimal_scenario_reads() {
        let s = Scenario::parse("s.toml", OK).unwrap();
        assert_eq!(s.partners[0].sender(), "ZZ:A");
        assert_eq!(s.length_ms, 86_400_000);
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let bad = OK.replace("rate_per_hour = 10", "rate_per_hour = \"ten\"");
        let e = Scenario::parse("s.toml", &bad).unwrap_err();
        assert_eq!((e.file.as_str(), e.line, e.field.as_str()), ("s.toml", 8, "rate_per_hour"));
        let bad = OK.replace("rate_per_hour = 10", "rate_per_hour = -3");
        let e = Scenario::parse("s.toml", &bad).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (8, "rate_per_hour"), "{e}");
        assert!(e.message.contains("-3"), "{e}");
        let bad = OK.replace("rate_per_hour = 10\n", "");
        let e = Scenario::parse("s.toml", &bad).unwrap_err();
        assert_eq!(e.field, "rate_per_hour", "{e}");
    }
}
