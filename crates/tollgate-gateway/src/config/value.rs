//! The checked values of `[gateway]` keys: names, URLs, the API key and metering-id
//! templates. Each parses from text (`FromStr`) and refuses what it cannot hold, so a value of
//! one of these types is valid wherever it goes.

use super::*;

/// A partner or route name: non-empty visible ASCII (it goes into metering ids and headers).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Name(String);

impl Name {
    /// The name as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Name {
    type Err = &'static str;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("must be non-empty visible ASCII (it goes into metering ids and headers)");
        }
        Ok(Self(s.to_owned()))
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An `http://` or `https://` URL with a host.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HttpUrl(String);

impl HttpUrl {
    /// The URL as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for HttpUrl {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // The URL parser drops tabs, newlines and outer spaces silently; the text kept (and
        // shown in logs) must be the URL that is called.
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(
                "a URL must not contain spaces, tabs, newlines or control characters".to_owned()
            );
        }
        // It also reads `http:,//host` or `http:\\host` as some URL of its own.
        if !(s.starts_with("http://") || s.starts_with("https://")) {
            return Err("expected a URL starting with http:// or https://".to_owned());
        }
        let parsed = reqwest::Url::parse(s).map_err(|e| format!("not a URL: {e}"))?;
        match parsed.scheme() {
            "http" | "https" if parsed.host().is_some() => Ok(Self(s.to_owned())),
            "http" | "https" => Err("the URL has no host".to_owned()),
            other => Err(format!("scheme {other:?} is not http or https")),
        }
    }
}

/// Whether `url` has a user or password (`http://user:pass@host/`).
pub(crate) fn has_userinfo(url: &HttpUrl) -> bool {
    reqwest::Url::parse(url.as_str())
        .is_ok_and(|u| !u.username().is_empty() || u.password().is_some())
}

/// `url` as it may be shown: the password of `scheme://user:password@host…`, if any, written
/// `(hidden)`.
pub(crate) fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let Some((userinfo, host)) = authority.rsplit_once('@') else { return url.to_owned() };
    let Some((user, _)) = userinfo.split_once(':') else { return url.to_owned() };
    format!("{scheme}://{user}:(hidden)@{host}{}", &rest[authority.len()..])
}

impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The `x-api-key` value the gateway sends to a remote quota service: non-empty visible
/// ASCII, marked sensitive (never logged, never shown in errors).
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(reqwest::header::HeaderValue);

impl ApiKey {
    /// The header value.
    pub fn header_value(&self) -> &reqwest::header::HeaderValue {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<secret>)")
    }
}

impl FromStr for ApiKey {
    type Err = &'static str;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut v = reqwest::header::HeaderValue::from_str(s)
            .ok()
            .filter(|_| !s.is_empty())
            .ok_or("must be non-empty visible ASCII")?;
        v.set_sensitive(true);
        Ok(Self(v))
    }
}

impl<'de> Deserialize<'de> for ApiKey {
    /// Like `FromStr`; the error names the key but never shows the value.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(|e| serde::de::Error::custom(format!("api_key = (hidden): {e}")))
    }
}

/// A metering id template: text with `{route}` and `{partner}` placeholders, every other
/// character valid in a metering id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeteringTemplate(String);

impl MeteringTemplate {
    /// The default, `{route}:{partner}`.
    pub(crate) fn default_template() -> Self {
        Self("{route}:{partner}".to_owned())
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The template for route `route`: `{route}` substituted, `{partner}` left. The error says
    /// why the result cannot be a metering id (too long, say).
    pub fn for_route(&self, route: &Name) -> Result<String, String> {
        let with_route = self.0.replace("{route}", route.as_str());
        MeteringId::new(&with_route.replace("{partner}", "P")).map_err(|e| e.to_string())?;
        Ok(with_route)
    }
}

impl FromStr for MeteringTemplate {
    type Err = String;
    fn from_str(template: &str) -> Result<Self, Self::Err> {
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            let after = &rest[open + 1..];
            let close = after.find('}').ok_or("unclosed '{'")?;
            let name = &after[..close];
            if name != "route" && name != "partner" {
                return Err(format!(
                    "unknown placeholder {{{name}}}: use {{route}} and {{partner}}"
                ));
            }
            rest = &after[close + 1..];
        }
        let probe = template.replace("{route}", "R").replace("{partner}", "P");
        MeteringId::new(&probe).map_err(|e| e.to_string())?;
        Ok(Self(template.to_owned()))
    }
}

impl fmt::Display for MeteringTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
