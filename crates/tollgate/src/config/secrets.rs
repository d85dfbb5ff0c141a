//! Keeping configured secrets out of config errors. A refused file's error goes to the exit
//! message at start-up, and after a refused reload to the log and to `/readyz`, which needs
//! no credentials; the parser's messages echo the value they refuse (``invalid type: integer
//! `987654321` ``). So every error about the file passes through [`Secrets::redact`]:
//! - an error pointing into a secret's value names the key and says `(hidden)` instead of the
//!   value: `admin_token = (hidden): invalid type: integer, expected a string`;
//! - any other error (and one about a URL holding a password) has each secret's text replaced
//!   by `(hidden)` wherever it shows: `url = "http://u:(hidden)@h/0": expected …`.
//!
//! The secrets: `[server] admin_token`, `[[client]] key`, `[[user]] token_sha256`,
//! `[gateway.quota] api_key`, `[[notify.webhook]] url`, the values of
//! `[gateway.route.delivery] headers`, and the password in `[store] url` and in a
//! `[[gateway.route]] deliver` URL (refused, but named in the error). Secret files
//! (`password_file`, `client_secret_file`, `secret_file`) are never read into an error.

use std::ops::Range;

use tollgate_http::config::ConfigError;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// What stands for a secret in an error.
const HIDDEN: &str = "(hidden)";

/// One secret written in the file.
struct Secret {
    /// The key it is the value of.
    key: &'static str,
    /// Where its value is in the source.
    span: Range<usize>,
    /// Its text as an error could show it (a number also as the parser prints it).
    texts: Vec<String>,
    /// The whole value is secret (not only a part of it, as a URL's password).
    whole: bool,
}

/// The secrets written in one config file's source.
pub(super) struct Secrets(Vec<Secret>);

impl Secrets {
    /// Finds the secrets of `source`, as far as it parses.
    pub(super) fn find(source: &str) -> Self {
        let (root, _) = DeTable::parse_recoverable(source);
        let root = root.get_ref();
        let mut found = Vec::new();
        let mut secret = |table: &DeTable<'_>, key: &'static str| {
            if let Some(value) = table.get(key) {
                let mut texts = Vec::new();
                if let Some(raw) = source.get(value.span()) {
                    texts.push(raw.trim_matches(['"', '\'']).to_owned());
                }
                texts_of(value.get_ref(), &mut texts);
                texts.retain(|t| !t.is_empty());
                found.push(Secret { key, span: value.span(), texts, whole: true });
            }
        };
        let table = |name: &str| match root.get(name).map(Spanned::get_ref) {
            Some(DeValue::Table(t)) => Some(t),
            _ => None,
        };
        let tables = |name: &str| -> Vec<&DeTable<'_>> {
            match root.get(name).map(Spanned::get_ref) {
                Some(DeValue::Array(a)) => a
                    .iter()
                    .filter_map(|v| match v.get_ref() {
                        DeValue::Table(t) => Some(t),
                        _ => None,
                    })
                    .collect(),
                Some(DeValue::Table(t)) => vec![t],
                _ => Vec::new(),
            }
        };
        if let Some(server) = table("server") {
            secret(server, "admin_token");
        }
        for client in tables("client") {
            secret(client, "key");
        }
        for user in tables("user") {
            secret(user, "token_sha256");
        }
        let gateway = table("gateway");
        if let Some(DeValue::Table(quota)) =
            gateway.and_then(|g| g.get("quota")).map(Spanned::get_ref)
        {
            secret(quota, "api_key");
        }
        // A webhook's URL may carry a token in its path: all of it is secret.
        if let Some(DeValue::Array(hooks)) =
            table("notify").and_then(|n| n.get("webhook")).map(Spanned::get_ref)
        {
            for hook in hooks.iter().filter_map(|h| match h.get_ref() {
                DeValue::Table(t) => Some(t),
                _ => None,
            }) {
                secret(hook, "url");
            }
        }
        let routes = match gateway.and_then(|g| g.get("route")).map(Spanned::get_ref) {
            Some(DeValue::Array(a)) => a.iter().collect(),
            _ => Vec::new(),
        };
        let mut urls = Vec::new();
        for route in routes {
            let DeValue::Table(route) = route.get_ref() else { continue };
            if let Some(DeValue::Table(delivery)) = route.get("delivery").map(Spanned::get_ref) {
                secret(delivery, "headers");
            }
            if let Some(url) = route.get("deliver") {
                urls.extend(url_secret("deliver", url));
            }
        }
        if let Some(url) = table("store").and_then(|s| s.get("url")) {
            urls.extend(url_secret("url", url));
        }
        found.extend(urls);
        Self(found)
    }

    /// `err` without any secret of the file (see the module docs).
    pub(super) fn redact(&self, err: ConfigError) -> ConfigError {
        let mut message = err.message().to_owned();
        if let Some(span) = err.span()
            && let Some(s) = self
                .0
                .iter()
                .find(|s| s.whole && s.span.start <= span.start && span.start < s.span.end)
            // A reader that already hides the value (`key = (hidden): …`) is left as it is.
            && !message.contains(HIDDEN)
            && !message.contains("(not shown)")
        {
            message = format!("{} = {HIDDEN}: {}", s.key, without_quoted(&message));
        }
        for s in &self.0 {
            for text in &s.texts {
                message = replace_word(&message, text);
            }
        }
        if message == err.message() {
            return err;
        }
        match err.span() {
            Some(span) => ConfigError::at(span, message),
            None => ConfigError::new(message),
        }
    }
}

/// The password of the URL `url` (the value of `key`), when it has one.
fn url_secret(key: &'static str, url: &Spanned<DeValue<'_>>) -> Option<Secret> {
    let DeValue::String(text) = url.get_ref() else { return None };
    let texts = vec![url_password(text)?.to_owned()];
    Some(Secret { key, span: url.span(), texts, whole: false })
}

/// The texts of a value and of everything inside it, as written and as the parser prints
/// numbers (`1.5e9` shows as `1500000000.0`).
fn texts_of(value: &DeValue<'_>, out: &mut Vec<String>) {
    match value {
        DeValue::String(s) => out.push(s.to_string()),
        DeValue::Integer(i) => {
            out.push(i.as_str().to_owned());
            if let Ok(n) = i128::from_str_radix(i.as_str(), i.radix()) {
                out.push(n.to_string());
            }
        }
        DeValue::Float(f) => {
            out.push(f.as_str().to_owned());
            if let Ok(x) = f.as_str().parse::<f64>() {
                out.push(format!("{x:?}"));
                out.push(x.to_string());
            }
        }
        DeValue::Boolean(_) => {} // `true` or `false`: nothing to keep
        DeValue::Datetime(d) => out.push(d.to_string()),
        DeValue::Array(a) => a.iter().for_each(|v| texts_of(v.get_ref(), out)),
        DeValue::Table(t) => t.iter().for_each(|(_, v)| texts_of(v.get_ref(), out)),
    }
}

/// The password of `scheme://user:password@host…`, when the URL has one.
pub(super) fn url_password(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let userinfo = authority.rsplit_once('@')?.0;
    let password = userinfo.split_once(':')?.1;
    (!password.is_empty()).then_some(password)
}

/// `url` with its password (if any) written as `(hidden)`.
pub fn redact_url(url: &str) -> String {
    match url_password(url) {
        Some(p) => url.replacen(&format!(":{p}@"), &format!(":{HIDDEN}@"), 1),
        None => url.to_owned(),
    }
}

/// `message` without the values the parser quotes in it (`` `…` `` and `"…"`).
fn without_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut chars = message.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '`' || c == '"' {
            for d in chars.by_ref() {
                if d == c {
                    break;
                }
            }
            // "integer `5`, expected" reads "integer, expected".
            if out.ends_with(' ') {
                out.pop();
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// `text` with each occurrence of `word` that is not part of a longer word (letters, digits)
/// replaced by `(hidden)`.
fn replace_word(text: &str, word: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(word) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + word.len()..].chars().next();
        let joined = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
        out.push_str(&rest[..at]);
        if joined(before) && word.starts_with(char::is_alphanumeric)
            || joined(after) && word.ends_with(char::is_alphanumeric)
        {
            out.push_str(word);
        } else {
            out.push_str(HIDDEN);
        }
        rest = &rest[at + word.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_values_go_and_words_are_replaced_whole() {
        assert_eq!(
            without_quoted("invalid type: integer `987654321`, expected a string"),
            "invalid type: integer, expected a string"
        );
        assert_eq!(
            replace_word("a 1234 b x1234 1234y 1234", "1234"),
            "a (hidden) b x1234 1234y (hidden)"
        );
        assert_eq!(url_password("redis://u:p%40ss@h:1/0"), Some("p%40ss"));
        assert_eq!(url_password("redis://h:6379/0"), None);
        assert_eq!(redact_url("rediss://u:pw@h/0"), "rediss://u:(hidden)@h/0");
    }

    #[test]
    fn an_error_in_a_secret_names_the_key_only() {
        let src = "[server]\nadmin_token = 987654321\n";
        let at = src.find("987").unwrap();
        let e = ConfigError::at(at..at + 9, "invalid type: integer `987654321`, expected a string");
        let e = Secrets::find(src).redact(e);
        assert_eq!(e.message(), "admin_token = (hidden): invalid type: integer, expected a string");
        let src = "[[client]]\nkey = 0x1F\n[[client]]\nkey = \"abcd1234\"\nallow = 7\n";
        let e = Secrets::find(src).redact(ConfigError::new("31 and abcd1234 and 0x1F"));
        assert_eq!(e.message(), "(hidden) and (hidden) and (hidden)");
    }
}
