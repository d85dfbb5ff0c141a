//! `[[rls.rule]]`: how a rate limit request's domain and descriptors map to metering ids, in
//! the spirit of envoy ratelimit's descriptor config.
//!
//! A rule names a `domain`, the exact set of keys a descriptor must have (`descriptor`), and a
//! `metering_id` template whose `{key}` placeholders the entries' values fill. `limit`,
//! `interval`, `unit` and `window` are optional: what a rule leaves out, a `[[policy]]`
//! matching the id supplies, as it does for the HTTP headers (see `tollgate_policy::Decider`).
//!
//! Invariant: a [`RuleSet`] holds only rules that passed [`RuleSet::new`]: a non-empty
//! domain, at least one key and no key twice, a template that names only the rule's keys and
//! has no unbalanced brace, and no two rules of one domain with the same set of keys. So
//! matching a descriptor can only fail on the values the request carries.

use std::collections::HashMap;
use std::fmt::Display;
use std::ops::Range;
use std::str::FromStr;

use serde::{Deserialize, Deserializer};
use tollgate_policy::Asked;
use tollgate_quota::{MeteringId, TimeUnit, WindowKind};
use toml::Spanned;

use crate::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;

/// `[rls]`: the descriptor rules (`[[rls.rule]]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RlsSection {
    /// The rules, in the order written.
    pub rule: Vec<RuleConfig>,
}

/// One `[[rls.rule]]` table as written; [`RuleSet::new`] checks the rules together. Each
/// value keeps its position in the file, so a refusal can point at it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// The request's `domain`, matched exactly.
    pub domain: Spanned<String>,
    /// The keys a descriptor must have, all and no others (in any order).
    pub descriptor: Spanned<Vec<String>>,
    /// The template of the metering id, e.g. `{document}:{partner}`.
    pub metering_id: Spanned<String>,
    /// Units per window; otherwise a matching `[[policy]]` supplies it.
    #[serde(default)]
    pub limit: Option<u64>,
    /// Window length in units (≥ 1; checked by [`RuleSet::new`]).
    #[serde(default)]
    pub interval: Option<Spanned<i64>>,
    /// second … month.
    #[serde(default, deserialize_with = "unit")]
    pub unit: Option<TimeUnit>,
    /// calendar (default), flexi or rolling.
    #[serde(default, deserialize_with = "window")]
    pub window: Option<WindowKind>,
}

fn parsed<'de, D, T>(d: D, key: &str) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: Display,
{
    let s = String::deserialize(d)?;
    s.parse().map(Some).map_err(|e| serde::de::Error::custom(format!("{key} = {s:?}: {e}")))
}

fn unit<'de, D: Deserializer<'de>>(d: D) -> Result<Option<TimeUnit>, D::Error> {
    parsed(d, "unit")
}

fn window<'de, D: Deserializer<'de>>(d: D) -> Result<Option<WindowKind>, D::Error> {
    parsed(d, "window")
}

/// A refused rule: why (naming the key and the value), and the value's byte range in the
/// file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RuleError {
    /// `KEY = VALUE: why`.
    pub message: String,
    /// Where the value is in the file's text.
    pub span: Range<usize>,
}

/// A piece of a metering id template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// Text copied as written.
    Text(String),
    /// The value of the rule's key at this index.
    Key(usize),
}

/// A checked rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The keys, as listed in `descriptor`.
    keys: Vec<String>,
    template: Vec<Part>,
    /// The template as written (for messages).
    template_text: String,
    /// What the rule asks for.
    pub asked: Asked,
}

impl Rule {
    /// The `metering_id` template as written.
    pub fn template(&self) -> &str {
        &self.template_text
    }
}

/// The checked rules, by domain.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    by_domain: HashMap<String, Vec<Rule>>,
}

/// Why a descriptor that matched a rule gives no metering id. Its message shows at most the
/// first [`BadId::SHOWN`] characters of the id: the message travels as the `grpc-message`
/// header, and a descriptor value of many kilobytes would make it larger than a peer takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the metering id {} built by the template {template:?} must be 1 to {} bytes of visible \
     ASCII",
    self.shown(),
    MeteringId::MAX_LEN
)]
pub struct BadId {
    /// The text the template gave.
    pub id: String,
    /// The template.
    pub template: String,
}

impl BadId {
    /// The most characters of the id the message shows.
    pub const SHOWN: usize = 64;

    /// The id as the message shows it: quoted whole, or its start and its length.
    fn shown(&self) -> String {
        if self.id.chars().count() <= Self::SHOWN {
            return format!("{:?}", self.id);
        }
        let start: String = self.id.chars().take(Self::SHOWN).collect();
        format!("{start:?}… ({} bytes)", self.id.len())
    }
}

impl RuleSet {
    /// Checks the rules together (see the module's invariant).
    pub fn new(section: &RlsSection) -> Result<Self, RuleError> {
        let mut by_domain: HashMap<String, Vec<Rule>> = HashMap::new();
        let mut seen: HashMap<(String, Vec<String>), usize> = HashMap::new();
        for (n, r) in section.rule.iter().enumerate() {
            let domain = r.domain.get_ref();
            if domain.is_empty() {
                return Err(err(&r.domain, format!("domain = {domain:?}: must not be empty")));
            }
            let keys = r.descriptor.get_ref();
            let shown = format!("descriptor = {keys:?}");
            if keys.is_empty() {
                return Err(err(&r.descriptor, format!("{shown}: needs at least one key")));
            }
            if let Some(k) = keys.iter().find(|k| k.is_empty()) {
                return Err(err(&r.descriptor, format!("{shown}: the key {k:?} is empty")));
            }
            let mut sorted = keys.clone();
            sorted.sort();
            if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
                return Err(err(
                    &r.descriptor,
                    format!("{shown}: the key {:?} is listed twice", w[0]),
                ));
            }
            if let Some(first) = seen.insert((domain.clone(), sorted), n + 1) {
                return Err(err(
                    &r.descriptor,
                    format!(
                        "{shown}: rls.rule #{first} already maps domain {domain:?} with these keys"
                    ),
                ));
            }
            let text = r.metering_id.get_ref();
            let template = parse_template(text, keys)
                .map_err(|why| err(&r.metering_id, format!("metering_id = {text:?}: {why}")))?;
            let interval = match &r.interval {
                None => None,
                Some(i) => Some(
                    check_interval(*i.get_ref(), r.unit)
                        .map_err(|why| err(i, format!("interval = {}: {why}", i.get_ref())))?,
                ),
            };
            by_domain.entry(domain.clone()).or_default().push(Rule {
                keys: keys.clone(),
                template,
                template_text: text.clone(),
                asked: Asked {
                    limit: r.limit,
                    interval,
                    unit: r.unit,
                    window: r.window,
                    start: None,
                },
            });
        }
        Ok(Self { by_domain })
    }

    /// True when there is no rule.
    pub fn is_empty(&self) -> bool {
        self.by_domain.is_empty()
    }

    /// The rule of `domain` whose keys are exactly the descriptor's, and the metering id its
    /// template makes from the entries' values. `Ok(None)` when no rule matches (the
    /// descriptor is then OK without a limit).
    pub fn find(
        &self,
        domain: &str,
        descriptor: &RateLimitDescriptor,
    ) -> Result<Option<(&Rule, MeteringId)>, BadId> {
        let Some(rules) = self.by_domain.get(domain) else { return Ok(None) };
        let entries = &descriptor.entries;
        'rules: for rule in rules {
            if rule.keys.len() != entries.len() {
                continue;
            }
            let mut values: Vec<Option<&str>> = vec![None; rule.keys.len()];
            for e in entries {
                let Some(i) = rule.keys.iter().position(|k| *k == e.key) else { continue 'rules };
                if values[i].replace(e.value.as_str()).is_some() {
                    continue 'rules; // a key given twice is not the rule's set of keys
                }
            }
            let mut id = String::with_capacity(64);
            for part in &rule.template {
                match part {
                    Part::Text(t) => id.push_str(t),
                    Part::Key(i) => id.push_str(values[*i].unwrap_or_default()),
                }
            }
            return match MeteringId::new(&id) {
                Ok(m) => Ok(Some((rule, m))),
                Err(_) => Err(BadId { id, template: rule.template_text.clone() }),
            };
        }
        Ok(None)
    }
}

/// An interval from 1 to the unit's longest (any unit's, when the rule names none).
fn check_interval(v: i64, unit: Option<TimeUnit>) -> Result<u32, String> {
    let max = unit.unwrap_or(TimeUnit::Second).max_interval();
    match u32::try_from(v) {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "must be a whole number from 1 to {max} (a window of at most {} years)",
            tollgate_quota::MAX_WINDOW_YEARS
        )),
    }
}

fn err<T>(at: &Spanned<T>, message: String) -> RuleError {
    RuleError { message, span: at.span() }
}

/// `{key}` placeholders (each one of `keys`) between literal text; `{{` and `}}` are not
/// escapes, a brace is never part of a metering id's literal text.
fn parse_template(text: &str, keys: &[String]) -> Result<Vec<Part>, String> {
    if text.is_empty() {
        return Err("must not be empty".into());
    }
    let mut parts = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        match rest.find(['{', '}']) {
            None => {
                parts.push(Part::Text(rest.to_owned()));
                break;
            }
            Some(at) if rest.as_bytes()[at] == b'}' => {
                return Err(format!(
                    "the '}}' at byte {} closes nothing",
                    text.len() - rest.len() + at
                ));
            }
            Some(at) => {
                if at > 0 {
                    parts.push(Part::Text(rest[..at].to_owned()));
                }
                let after = &rest[at + 1..];
                let close = after.find('}').ok_or("a '{' is never closed")?;
                let name = &after[..close];
                let index = keys.iter().position(|k| k == name).ok_or_else(|| {
                    format!("{{{name}}} is not one of the descriptor's keys {keys:?}")
                })?;
                parts.push(Part::Key(index));
                rest = &after[close + 1..];
            }
        }
    }
    if let Some(Part::Text(t)) = parts
        .iter()
        .find(|p| matches!(p, Part::Text(t) if !t.bytes().all(|b| b.is_ascii_graphic())))
    {
        return Err(format!("the text {t:?} is not visible ASCII, which a metering id must be"));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;

    #[derive(Deserialize)]
    struct Doc {
        rls: RlsSection,
    }

    fn rules(src: &str) -> Result<RuleSet, String> {
        let doc: Doc = toml::from_str(src).map_err(|e| e.message().to_owned())?;
        RuleSet::new(&doc.rls).map_err(|e| e.message)
    }

    fn descriptor(pairs: &[(&str, &str)]) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: pairs
                .iter()
                .map(|(k, v)| Entry { key: (*k).into(), value: (*v).into() })
                .collect(),
            hits_addend: None,
        }
    }

    const EDI: &str = r#"
[[rls.rule]]
domain = "edi"
descriptor = ["partner", "document"]
metering_id = "{document}:{partner}"
limit = 1000
interval = 1
unit = "hour"
window = "calendar"
"#;

    #[test]
    fn exact_keys_in_any_order_fill_the_template() {
        let set = rules(EDI).unwrap();
        let d = descriptor(&[("document", "214"), ("partner", "ACME")]);
        let (rule, id) = set.find("edi", &d).unwrap().unwrap();
        assert_eq!(id.as_str(), "214:ACME");
        assert_eq!(rule.asked.limit, Some(1000));
        assert_eq!(rule.asked.unit, Some(TimeUnit::Hour));
        for miss in [
            descriptor(&[("partner", "ACME")]),
            descriptor(&[("partner", "ACME"), ("document", "214"), ("x", "y")]),
            descriptor(&[("partner", "ACME"), ("partner", "B")]),
            descriptor(&[("partner", "ACME"), ("doc", "214")]),
        ] {
            assert!(set.find("edi", &miss).unwrap().is_none(), "{miss:?}");
        }
        assert!(set.find("other", &d).unwrap().is_none());
    }

    #[test]
    fn a_value_that_makes_no_metering_id_is_named() {
        let set = rules(EDI).unwrap();
        let e =
            set.find("edi", &descriptor(&[("document", "2 14"), ("partner", "A")])).unwrap_err();
        assert_eq!(e.id, "2 14:A");
    }

    #[test]
    fn bad_rules_name_key_and_value() {
        let base = "[[rls.rule]]\ndomain = \"edi\"\n";
        for (rest, needle) in [
            ("descriptor = []\nmetering_id = \"x\"\n", "descriptor = []: needs at least one key"),
            ("descriptor = [\"a\", \"a\"]\nmetering_id = \"{a}\"\n", "listed twice"),
            ("descriptor = [\"a\"]\nmetering_id = \"{b}\"\n", "metering_id = \"{b}\": {b} is not"),
            ("descriptor = [\"a\"]\nmetering_id = \"{a\"\n", "never closed"),
            ("descriptor = [\"a\"]\nmetering_id = \"a}\"\n", "closes nothing"),
            ("descriptor = [\"a\"]\nmetering_id = \"a b {a}\"\n", "visible ASCII"),
            ("descriptor = [\"a\"]\nmetering_id = \"{a}\"\ninterval = 0\n", "interval = 0"),
            (
                "descriptor = [\"a\"]\nmetering_id = \"{a}\"\nunit = \"fortnight\"\n",
                "unit = \"fortnight\"",
            ),
            (
                "descriptor = [\"a\"]\nmetering_id = \"{a}\"\nwindow = \"sliding\"\n",
                "window = \"sliding\"",
            ),
            ("descriptor = [\"a\"]\nmetering_id = \"{a}\"\ncolour = 1\n", "colour"),
        ] {
            let e = rules(&format!("{base}{rest}")).unwrap_err();
            assert!(e.contains(needle), "{rest}: {e}");
        }
        let twice = format!("{EDI}{EDI}");
        assert!(rules(&twice).unwrap_err().contains("rls.rule #1 already maps domain \"edi\""));
        let e = rules("[[rls.rule]]\ndomain = \"\"\ndescriptor = [\"a\"]\nmetering_id = \"{a}\"\n");
        assert!(e.unwrap_err().contains("domain = \"\""));
    }
}
