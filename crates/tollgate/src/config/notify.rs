//! `[notify]`, its `[[notify.webhook]]` entries and `[notify.smtp]`: where notifications go
//! and when they fire.
//!
//! A webhook's `secret_file` and the SMTP `password_file` are read when the file is parsed (at
//! start-up and at each reload's check): a missing, unreadable or empty file refuses the
//! config, naming the entry, so a service never starts sending unsigned or wrongly signed
//! notifications. A key or password is the file's content without trailing whitespace (the
//! newline an editor or `echo` leaves); it is kept in a [`Secret`], never shown. A webhook's
//! `url` may carry a token in its path (many chat services' do): an error about it says
//! `url = (hidden)`.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use tollgate_http::config::{ConfigError, key};
use tollgate_notify::{
    Channel, Email, EventKind, Mailbox, Rules, Secret, Security, SendOptions, Webhook,
};
use toml::Spanned;

/// The longest secret file read (an HMAC key needs far less).
const MAX_SECRET_BYTES: u64 = 64 * 1024;

/// `[notify]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotifySection {
    /// Held units per partner at which `backlog_exceeded` fires (≥ 1).
    #[serde(deserialize_with = "backlog_threshold")]
    pub backlog_threshold: u64,
    /// The least seconds between two events of one kind for one partner (0 to one day).
    #[serde(deserialize_with = "min_interval_s")]
    pub min_interval_s: u64,
    /// Seconds without new duplicates after which the next one is `duplicates_started`
    /// (1 to 7 days).
    #[serde(deserialize_with = "duplicates_quiet_s")]
    pub duplicates_quiet_s: u64,
    /// The longest one webhook request may take, in ms (1 to 60,000).
    #[serde(deserialize_with = "timeout_ms")]
    pub timeout_ms: u64,
    /// `[[notify.webhook]]`: where events are posted.
    pub webhook: Vec<WebhookEntry>,
    /// `[notify.smtp]`: where events are mailed.
    pub smtp: Option<SmtpEntry>,
}

impl Default for NotifySection {
    fn default() -> Self {
        let rules = Rules::default();
        Self {
            backlog_threshold: rules.backlog_threshold,
            min_interval_s: rules.min_interval.as_secs(),
            duplicates_quiet_s: rules.duplicates_quiet.as_secs(),
            timeout_ms: 10_000,
            webhook: Vec::new(),
            smtp: None,
        }
    }
}

/// `[[notify.webhook]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookEntry {
    /// Its name in logs, metrics and test answers (`webhook-N` by default, N its place).
    #[serde(default, deserialize_with = "name")]
    pub name: Option<Spanned<String>>,
    /// Where events are posted: an `http://` or `https://` URL.
    #[serde(deserialize_with = "url")]
    pub url: reqwest::Url,
    /// The file holding the HMAC key of the signature.
    pub secret_file: Spanned<PathBuf>,
    /// The events it gets; all when absent.
    #[serde(default, deserialize_with = "events")]
    pub events: Option<Vec<EventKind>>,
    /// The key read from `secret_file` (by [`NotifySection::read_secrets`]).
    #[serde(skip)]
    pub secret: Option<Secret>,
}

/// `[notify.smtp]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmtpEntry {
    /// The SMTP server's host name (also the name its TLS certificate must carry).
    #[serde(deserialize_with = "host")]
    pub host: String,
    /// Its port; by default 465 with `tls`, 587 with `starttls`, 25 with `none`.
    #[serde(default, deserialize_with = "port")]
    pub port: Option<u16>,
    /// `tls`, `starttls` (the default) or `none`.
    #[serde(default = "starttls", deserialize_with = "security")]
    pub security: Security,
    /// The user to log in as (with `password_file`).
    #[serde(default)]
    pub username: Option<Spanned<String>>,
    /// The file holding the password (with `username`).
    #[serde(default)]
    pub password_file: Option<Spanned<PathBuf>>,
    /// The sender: `tollgate@example.com` or `Tollgate <tollgate@example.com>`.
    #[serde(deserialize_with = "from")]
    pub from: Mailbox,
    /// The recipients, at least one.
    #[serde(deserialize_with = "to")]
    pub to: Vec<Mailbox>,
    /// The events mailed; all when absent.
    #[serde(default, deserialize_with = "events")]
    pub events: Option<Vec<EventKind>>,
    /// The password read from `password_file` (by [`NotifySection::read_secrets`]).
    #[serde(skip)]
    pub password: Option<Secret>,
}

/// The name of the e-mail channel in logs, metrics and test answers.
const SMTP_NAME: &str = "smtp";

/// The content of the secret file `file` (its key named `key` in errors) without trailing
/// whitespace; an error points at the file's value.
fn read_secret(key: &str, file: &Spanned<PathBuf>, what: &str) -> Result<Secret, ConfigError> {
    let path = file.get_ref();
    let refused = |why: String| ConfigError::at(file.span(), format!("{key} = {path:?}: {why}"));
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_SECRET_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| refused(format!("cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_SECRET_BYTES {
        return Err(refused(format!("larger than {MAX_SECRET_BYTES} bytes")));
    }
    Secret::new(bytes.trim_ascii_end()).ok_or_else(|| refused(format!("empty; write {what} in it")))
}

impl NotifySection {
    /// Reads each webhook's `secret_file` and the SMTP `password_file`, and checks the names
    /// are unique; an error points at the entry's file (or `name`).
    pub fn read_secrets(&mut self) -> Result<(), ConfigError> {
        for entry in &mut self.webhook {
            let key = read_secret("secret_file", &entry.secret_file, "the webhook's HMAC key")?;
            entry.secret = Some(key);
        }
        if let Some(smtp) = &mut self.smtp {
            smtp.password = smtp_password(smtp)?;
        }
        let names = self.names();
        for (i, n) in names.iter().enumerate() {
            let taken = match names[..i].iter().position(|m| m == n) {
                Some(first) => format!("[[notify.webhook]] #{}", first + 1),
                None if self.smtp.is_some() && n == SMTP_NAME => "[notify.smtp]".to_owned(),
                None => continue,
            };
            let why = format!("name = {n:?}: already the name of {taken} (names are unique)");
            return Err(match &self.webhook[i].name {
                Some(name) => ConfigError::at(name.span(), why),
                None => ConfigError::new(format!("[[notify.webhook]] #{} {why}", i + 1)),
            });
        }
        Ok(())
    }

    /// Each webhook's name, defaults given.
    fn names(&self) -> Vec<String> {
        (self.webhook.iter().enumerate())
            .map(|(i, w)| match &w.name {
                Some(name) => name.get_ref().clone(),
                None => format!("webhook-{}", i + 1),
            })
            .collect()
    }

    /// The channels to send to: the webhooks, then e-mail (secrets read by
    /// [`NotifySection::read_secrets`]; a webhook whose secret was not read is left out).
    pub fn channels(&self) -> Vec<Channel> {
        let all = || EventKind::WATCHED.to_vec();
        let mut channels: Vec<Channel> = (self.webhook.iter().zip(self.names()))
            .filter_map(|(w, name)| {
                let secret = w.secret.clone()?;
                let events = w.events.clone().unwrap_or_else(all);
                Some(Webhook { name, url: w.url.clone(), secret, events }.into())
            })
            .collect();
        if let Some(smtp) = &self.smtp {
            let login = smtp.username.as_ref().zip(smtp.password.clone());
            channels.push(Channel::Email(Email {
                name: SMTP_NAME.to_owned(),
                host: smtp.host.clone(),
                port: smtp.port.unwrap_or_else(|| smtp.security.default_port()),
                security: smtp.security,
                login: login.map(|(user, password)| (user.get_ref().clone(), password)),
                from: smtp.from.clone(),
                to: smtp.to.clone(),
                events: smtp.events.clone().unwrap_or_else(all),
            }));
        }
        channels
    }

    /// When events fire.
    pub fn rules(&self) -> Rules {
        Rules {
            backlog_threshold: self.backlog_threshold,
            min_interval: Duration::from_secs(self.min_interval_s),
            duplicates_quiet: Duration::from_secs(self.duplicates_quiet_s),
        }
    }

    /// How events are sent.
    pub fn send_options(&self) -> SendOptions {
        SendOptions { timeout: Duration::from_millis(self.timeout_ms), ..SendOptions::default() }
    }
}

const DAY_S: u64 = 86_400;

fn backlog_threshold<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    key::at_least_one(d, "backlog_threshold")
}
fn min_interval_s<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    key::bounded(d, "min_interval_s", 0, DAY_S, "must be between 0 and 86400 (one day)")
}
fn duplicates_quiet_s<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    key::bounded(d, "duplicates_quiet_s", 1, 7 * DAY_S, "must be between 1 and 604800 (7 days)")
}
fn timeout_ms<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    key::bounded(d, "timeout_ms", 1, 60_000, "must be between 1 and 60000 (one minute)")
}

fn name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Spanned<String>>, D::Error> {
    use serde::de::Error as _;
    let spanned = Spanned::<String>::deserialize(d)?;
    let s = spanned.get_ref();
    let fits = (1..=64).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_graphic());
    if !fits {
        return Err(D::Error::custom(format!(
            "name = {s:?}: must be 1 to 64 visible ASCII characters (no spaces)"
        )));
    }
    Ok(Some(spanned))
}

/// An `http://` or `https://` URL with a host; the value is never quoted back.
fn url<'de, D: Deserializer<'de>>(d: D) -> Result<reqwest::Url, D::Error> {
    use serde::de::Error as _;
    let s = String::deserialize(d)?;
    let refused = |why: &str| D::Error::custom(format!("url = (hidden): {why}"));
    let url: reqwest::Url = s.parse().map_err(|e| refused(&format!("not a URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(refused("expected an http:// or https:// URL"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(refused("the URL has no host"));
    }
    Ok(url)
}

/// The SMTP password, when `username` and `password_file` are both given (one without the
/// other is refused).
fn smtp_password(smtp: &SmtpEntry) -> Result<Option<Secret>, ConfigError> {
    match (&smtp.username, &smtp.password_file) {
        (Some(_), Some(file)) => {
            let password = read_secret("password_file", file, "the SMTP password")?;
            if !password.is_utf8() {
                let why = format!("password_file = {:?}: not UTF-8 text", file.get_ref());
                return Err(ConfigError::at(file.span(), why));
            }
            Ok(Some(password))
        }
        (Some(user), None) => {
            let why = format!(
                "username = {:?}: needs password_file (the file holding the password)",
                user.get_ref()
            );
            Err(ConfigError::at(user.span(), why))
        }
        (None, Some(file)) => {
            let why = format!("password_file = {:?}: needs username", file.get_ref());
            Err(ConfigError::at(file.span(), why))
        }
        (None, None) => Ok(None),
    }
}

fn host<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    use serde::de::Error as _;
    let s = String::deserialize(d)?;
    let fits =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.:[]_".contains(&b));
    if !fits {
        return Err(D::Error::custom(format!("host = {s:?}: expected a host name or an address")));
    }
    Ok(s)
}
fn port<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
    let port: u64 = key::bounded(d, "port", 1, 65_535, "must be between 1 and 65535")?;
    Ok(u16::try_from(port).ok())
}
fn starttls() -> Security {
    Security::StartTls
}
fn security<'de, D: Deserializer<'de>>(d: D) -> Result<Security, D::Error> {
    use serde::de::Error as _;
    match String::deserialize(d)?.as_str() {
        "tls" => Ok(Security::Tls),
        "starttls" => Ok(Security::StartTls),
        "none" => Ok(Security::None),
        other => Err(D::Error::custom(format!(
            "security = {other:?}: expected \"tls\", \"starttls\" or \"none\""
        ))),
    }
}
fn from<'de, D: Deserializer<'de>>(d: D) -> Result<Mailbox, D::Error> {
    use serde::de::Error as _;
    let s = String::deserialize(d)?;
    tollgate_notify::mailbox(&s).map_err(|e| D::Error::custom(format!("from = {s:?}: {e}")))
}
fn to<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Mailbox>, D::Error> {
    use serde::de::Error as _;
    let all = Vec::<String>::deserialize(d)?;
    if all.is_empty() {
        return Err(D::Error::custom("to = []: name at least one recipient"));
    }
    let one = |s: &String| {
        tollgate_notify::mailbox(s).map_err(|e| D::Error::custom(format!("to = {s:?}: {e}")))
    };
    all.iter().map(one).collect()
}

fn events<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<EventKind>>, D::Error> {
    use serde::de::Error as _;
    let names = Vec::<String>::deserialize(d)?;
    if names.is_empty() {
        return Err(D::Error::custom(
            "events = []: name at least one event, or leave events out for all of them",
        ));
    }
    let mut kinds = Vec::new();
    for n in &names {
        let kind: EventKind =
            n.parse().map_err(|e| D::Error::custom(format!("events = {n:?}: {e}")))?;
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    Ok(Some(kinds))
}
