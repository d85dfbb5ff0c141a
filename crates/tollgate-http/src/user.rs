//! Users of the admin API: `[[user]]` tables with a name, the SHA-256 of the user's token and
//! a role, so an integration team can watch and act without holding the one admin token.
//!
//! Roles, each one a set of [`Permission`]s:
//! - `viewer`: read (counters, policies, the queue);
//! - `operator`: read, the queue's retry, release and purge, and test notifications;
//! - `limits`: read, and edit the limits (`PUT /v1/policies`, counter resets);
//! - `admin`: everything, as the admin token.
//!
//! Invariant: **no token is kept.** Only its SHA-256 is in the config and in memory; a
//! presented token is hashed and compared in constant time with every user's digest.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer};
use sha2::{Digest, Sha256};

use crate::client::constant_time_eq;

/// What an admin endpoint needs of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// Read counters, policies and the queue.
    Read,
    /// Retry, release and purge queue items.
    Queue,
    /// Send a test notification to the webhooks.
    Notify,
    /// Edit policies and reset counters.
    Limits,
    /// Everything else (uploads without a client key, backups).
    Admin,
}

impl Permission {
    /// What the permission lets one do, for a 403's detail.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Read => "read the admin API",
            Self::Queue => "retry, release or purge queue items",
            Self::Notify => "send test notifications",
            Self::Limits => "change limits or reset counters",
            Self::Admin => "use this admin endpoint",
        }
    }
}

/// A user's role (`[[user]] role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Reads only.
    Viewer,
    /// Reads and acts on the queue.
    Operator,
    /// Reads and edits limits.
    Limits,
    /// Everything.
    Admin,
}

impl Role {
    /// Whether this role may do what `need` covers.
    pub fn allows(self, need: Permission) -> bool {
        matches!(
            (self, need),
            (Self::Admin, _)
                | (_, Permission::Read)
                | (Self::Operator, Permission::Queue | Permission::Notify)
                | (Self::Limits, Permission::Limits)
        )
    }

    /// The lowercase name used in the config and the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Operator => "operator",
            Self::Limits => "limits",
            Self::Admin => "admin",
        }
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "viewer" => Ok(Self::Viewer),
            "operator" => Ok(Self::Operator),
            "limits" => Ok(Self::Limits),
            "admin" => Ok(Self::Admin),
            _ => Err("expected viewer, operator, limits or admin".to_owned()),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The SHA-256 of a token: 64 hexadecimal digits in the config.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenDigest([u8; 32]);

impl TokenDigest {
    /// The digest of `token`.
    pub fn of(token: &str) -> Self {
        Self(Sha256::digest(token.as_bytes()).into())
    }

    /// True when `token` hashes to this digest (compared in constant time).
    pub fn matches(&self, token: &str) -> bool {
        constant_time_eq(&Self::of(token).0, &self.0)
    }
}

/// Never printed: a digest of a weak token could be guessed offline.
impl fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenDigest(<not shown>)")
    }
}

impl FromStr for TokenDigest {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return Err(format!(
                "expected 64 hexadecimal digits (the SHA-256 of the token, e.g. from \
                 `printf %s TOKEN | sha256sum`), got {} characters",
                s.chars().count()
            ));
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks(2).enumerate() {
            let hex = std::str::from_utf8(pair).ok().and_then(|p| u8::from_str_radix(p, 16).ok());
            out[i] = hex.ok_or("expected hexadecimal digits only (0-9, a-f)")?;
        }
        Ok(Self(out))
    }
}

/// One `[[user]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    /// Who it is, in the audit log (non-empty).
    #[serde(deserialize_with = "name")]
    pub name: String,
    /// The SHA-256 of the user's bearer token.
    #[serde(deserialize_with = "digest")]
    pub token_sha256: TokenDigest,
    /// What the user may do.
    #[serde(deserialize_with = "role")]
    pub role: Role,
}

fn name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    use serde::de::Error;
    let s = String::deserialize(d)?;
    if s.trim().is_empty() || s.chars().any(char::is_control) {
        return Err(D::Error::custom(format!(
            "name = {s:?}: must be non-empty, without control characters"
        )));
    }
    Ok(s)
}

fn digest<'de, D: Deserializer<'de>>(d: D) -> Result<TokenDigest, D::Error> {
    use serde::de::Error;
    let s = String::deserialize(d)?;
    // The value is a digest, not the token, but a wrong one may be a pasted token: not shown.
    s.parse().map_err(|e| D::Error::custom(format!("token_sha256 (not shown): {e}")))
}

fn role<'de, D: Deserializer<'de>>(d: D) -> Result<Role, D::Error> {
    crate::config::key::parsed(d, "role")
}

/// Who made an admin request: a `[[user]]`, the admin token, or anyone on an open loopback
/// listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// The user's name, `admin` for the admin token, `loopback` without credentials.
    pub name: String,
    /// What it may do.
    pub role: Role,
}

/// The users of the admin API, looked up by token.
#[derive(Debug, Clone, Default)]
pub struct Users(Vec<User>);

impl Users {
    /// The users of the `[[user]]` tables; two users may not share a name or a token.
    pub fn new(users: Vec<User>) -> Result<Self, String> {
        for (i, u) in users.iter().enumerate() {
            if let Some(j) = users[..i].iter().position(|o| o.name == u.name) {
                return Err(format!(
                    "[[user]] #{} (name {:?}): name already used by [[user]] #{}",
                    i + 1,
                    u.name,
                    j + 1
                ));
            }
            if let Some(j) = users[..i].iter().position(|o| o.token_sha256 == u.token_sha256) {
                return Err(format!(
                    "[[user]] #{} (name {:?}): same token as [[user]] #{}; every user needs their own",
                    i + 1,
                    u.name,
                    j + 1
                ));
            }
        }
        Ok(Self(users))
    }

    /// True when no user is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The user whose token this is.
    pub fn find(&self, token: &str) -> Option<Actor> {
        let digest = TokenDigest::of(token);
        // Every digest is compared, so the time taken does not tell which user matched.
        let mut found = None;
        for u in &self.0 {
            if constant_time_eq(&digest.0, &u.token_sha256.0) && found.is_none() {
                found = Some(Actor { name: u.name.clone(), role: u.role });
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_allow_what_the_docs_say() {
        use Permission::*;
        let table = [
            (Role::Viewer, [true, false, false, false, false]),
            (Role::Operator, [true, true, false, false, true]),
            (Role::Limits, [true, false, true, false, false]),
            (Role::Admin, [true, true, true, true, true]),
        ];
        for (role, want) in table {
            let got = [Read, Queue, Limits, Admin, Notify].map(|p| role.allows(p));
            assert_eq!(got, want, "{role}");
        }
    }

    #[test]
    fn digests_parse_and_match_their_token() {
        // printf %s s3cret | sha256sum
        let d: TokenDigest =
            "a7f1a7e1a3a5ea43f5fb2b07e3f4b0a88f0b7bbd20b25c3a5d8b6f2a11f1f1e2".parse().unwrap();
        assert!(!d.matches("s3cret"));
        let real = TokenDigest::of("s3cret");
        assert!(real.matches("s3cret") && !real.matches("s3cret "));
        assert!("abc".parse::<TokenDigest>().unwrap_err().contains("64 hexadecimal"));
        let bad = "g".repeat(64).parse::<TokenDigest>().unwrap_err();
        assert!(bad.contains("hexadecimal digits only"), "{bad}");
        assert!(!format!("{real:?}").contains(|c: char| c.is_ascii_digit()));
    }

    #[test]
    fn users_are_found_by_token_and_must_differ() {
        let u = |name: &str, token: &str, role| User {
            name: name.into(),
            token_sha256: TokenDigest::of(token),
            role,
        };
        let users =
            Users::new(vec![u("ann", "t1", Role::Viewer), u("bob", "t2", Role::Operator)]).unwrap();
        assert_eq!(users.find("t2"), Some(Actor { name: "bob".into(), role: Role::Operator }));
        assert_eq!(users.find("t3"), None);
        let e = Users::new(vec![u("ann", "t1", Role::Viewer), u("ann", "t2", Role::Admin)]);
        assert!(e.unwrap_err().contains("name already used"));
        let e = Users::new(vec![u("ann", "t1", Role::Viewer), u("bob", "t1", Role::Admin)]);
        assert!(e.unwrap_err().contains("same token"));
    }
}
