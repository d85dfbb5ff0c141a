//! Versions of the policy set, so two editors cannot silently overwrite each other: the
//! `ETag` that `GET /v1/policies` answers, and the `If-Match` a `PUT /v1/policies` may send
//! (RFC 9110 §8.8.3 and §13.1.1).
//!
//! The version is a hash of the set in force (its rules as JSON), so it names the content: it
//! moves on with every change that comes into force (from the API or the file), and the same
//! content has the same version, also across restarts.

use axum::http::HeaderMap;
use axum::http::header::IF_MATCH;
use sha2::{Digest, Sha256};

use super::PolicySet;
use crate::headers::invalid_header;
use tollgate_http::problem::Problem;

/// The strong entity tag of `set`: `"` + 32 hex digits of a SHA-256 over its rules + `"`.
pub(crate) fn etag(set: &PolicySet) -> String {
    let json = serde_json::to_vec(set.rules()).unwrap_or_default();
    let digest = Sha256::digest(&json);
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// A request's `If-Match`: which versions the change may be applied to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IfMatch {
    /// `*`: any version (the set always exists).
    Any,
    /// A list of entity tags as sent (quoted; weak ones keep their `W/`).
    Tags(Vec<String>),
}

impl IfMatch {
    /// The request's `If-Match` (every such header, joined), `None` without one; a 400
    /// `invalid-header` naming `if-match` and the value when it is not `*` or a list of
    /// entity tags.
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<IfMatch>, Problem> {
        let mut values = headers.get_all(IF_MATCH).iter().peekable();
        if values.peek().is_none() {
            return Ok(None);
        }
        let mut text = String::new();
        for v in values {
            let v = v
                .to_str()
                .map_err(|_| invalid_header("if-match", None, "if-match must be visible ASCII"))?;
            if !text.is_empty() {
                text.push(',');
            }
            text.push_str(v);
        }
        Self::parse(&text).map(Some).ok_or_else(|| {
            invalid_header(
                "if-match",
                Some(&text),
                "if-match must be * or a list of entity tags such as \"1f0c…\" (with the \
                 quotes), as GET /v1/policies answers in ETag",
            )
        })
    }

    fn parse(text: &str) -> Option<IfMatch> {
        if text.trim() == "*" {
            return Some(IfMatch::Any);
        }
        let tags: Vec<String> = text
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| is_entity_tag(t).then(|| t.to_owned()))
            .collect::<Option<_>>()?;
        (!tags.is_empty()).then_some(IfMatch::Tags(tags))
    }

    /// True when `current` (a strong tag from [`etag`]) is one the request allows; a weak tag
    /// never matches (strong comparison).
    pub fn matches(&self, current: &str) -> bool {
        match self {
            IfMatch::Any => true,
            IfMatch::Tags(tags) => tags.iter().any(|t| t == current),
        }
    }

    /// The value as sent, to name in a refusal.
    pub fn shown(&self) -> String {
        match self {
            IfMatch::Any => "*".into(),
            IfMatch::Tags(tags) => tags.join(", "),
        }
    }
}

/// `W/"…"` or `"…"` with entity-tag characters between the quotes.
fn is_entity_tag(t: &str) -> bool {
    let t = t.strip_prefix("W/").unwrap_or(t);
    t.len() >= 2
        && t.starts_with('"')
        && t.ends_with('"')
        && t[1..t.len() - 1].bytes().all(|b| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_match_is_a_star_or_a_list_of_entity_tags() {
        assert_eq!(IfMatch::parse("*"), Some(IfMatch::Any));
        let list = IfMatch::parse(r#""a", W/"b" ,"c""#).unwrap();
        assert!(list.matches("\"a\"") && list.matches("\"c\""));
        assert!(!list.matches("\"b\""), "a weak tag never matches");
        assert!(!list.matches("\"d\""));
        for bad in ["abc", "\"a", "", " , ", "\"a\"b\"", "*, \"a\""] {
            assert_eq!(IfMatch::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_version_names_the_content() {
        let a = crate::policy::parse_policies(
            std::path::Path::new("p.toml"),
            "[[policy]]\nmatch = \"A:*\"\nlimit = 1\n",
        )
        .unwrap();
        assert_eq!(etag(&a), etag(&a.clone()));
        assert_ne!(etag(&a), etag(&PolicySet::default()));
        assert_eq!(etag(&a).len(), 34);
    }
}
