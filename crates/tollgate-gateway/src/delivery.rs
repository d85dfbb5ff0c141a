//! Delivery: handing an admitted interchange, byte for byte, to its route's target.
//!
//! - `dir:` writes `.<id>.edi.tmp`, fsyncs it, renames it to `<id>.edi` and fsyncs the
//!   directory (one fsync for every rename waiting at that moment, see `DirSync`). The name
//!   comes from the item id, so a redelivery after a crash replaces the same file instead of
//!   adding a second one; readers never see a partial file, and a failed attempt (a full
//!   disk) removes its temp file. A simulation writes no file ([`Deliverer::simulated`]).
//! - `http(s)://` POSTs the bytes with the route's Content-Type (`application/edi-x12` by
//!   default), its fixed headers, `Tollgate-Interchange-Id`, `Tollgate-Partner` and
//!   `Tollgate-Document`, and its credentials: HTTP Basic, or a bearer token from its OAuth 2.0
//!   token endpoint (see `token`), and its client certificate. 2xx is done; 5xx, a timeout,
//!   a connection error or a token endpoint that fails is retried with capped exponential
//!   backoff; a 4xx (other than 408/429), or [`MAX_ATTEMPTS`], is dead. A 401 to a bearer
//!   token is retried at once, once, with a new token.
//! - At most `max_concurrency` deliveries are in flight per target (one semaphore each).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use tokio::sync::Semaphore;

use crate::config::{Auth, Route, Target};
use crate::spool::sync_dir;

mod token;

/// Attempts after which a retryable failure becomes dead.
pub(crate) const MAX_ATTEMPTS: u32 = 10;
/// The first retry delay; doubled per attempt up to [`MAX_BACKOFF`].
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest retry delay.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long one HTTP delivery may take.
pub(crate) const HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// The outcome of one delivery attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// The target has it.
    Done,
    /// Try again later (5xx, timeout, connection error, disk error).
    Retry(String),
    /// Never try again (4xx).
    Refused(String),
}

/// The delay before retry number `attempts` (1-based).
pub(crate) fn backoff(attempts: u32) -> Duration {
    let exp = attempts.saturating_sub(1).min(20);
    FIRST_BACKOFF.saturating_mul(1 << exp).min(MAX_BACKOFF)
}

/// One of a target's delivery slots, held for the whole of one attempt.
#[derive(Debug)]
pub struct Slot {
    /// Given back when the attempt ends.
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// What a delivery needs to know about the interchange.
#[derive(Debug, Clone)]
pub struct Parcel {
    /// Item id: header value and file name.
    pub id: String,
    /// Partner name.
    pub partner: String,
    /// Document type.
    pub document: String,
    /// The interchange as received.
    pub bytes: Vec<u8>,
}

/// Group commit of directory fsyncs: every caller returns only after an fsync of the
/// directory that started after its own rename, but one fsync serves everyone waiting.
///
/// Invariant: a caller takes its ticket after its rename; an fsync covers every ticket
/// issued before it started (`issued` is read under the lock, before the fsync).
#[derive(Default)]
struct DirSync {
    issued: AtomicU64,
    synced: tokio::sync::Mutex<u64>,
}

impl DirSync {
    async fn sync(&self, dir: &Path) -> Result<(), String> {
        let ticket = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        let mut synced = self.synced.lock().await;
        if *synced >= ticket {
            return Ok(());
        }
        let covers = self.issued.load(Ordering::SeqCst);
        let d = dir.to_path_buf();
        tokio::task::spawn_blocking(move || sync_dir(&d).map_err(|e| e.to_string()))
            .await
            .map_err(|e| e.to_string())??;
        *synced = covers;
        Ok(())
    }
}

/// Delivers to every route's target, with one concurrency cap per target.
pub struct Deliverer {
    client: reqwest::Client,
    /// Per route (by name): its own client (with its client certificate) and token source.
    links: HashMap<String, Link>,
    limits: HashMap<Target, Arc<Semaphore>>,
    dir_syncs: HashMap<Target, DirSync>,
    /// True only in a simulation ([`crate::SpoolOptions::ephemeral`]): `dir:` files are not
    /// written at all, since a simulation throws them away.
    simulated: bool,
}

/// What one HTTP route calls its target with, beyond the shared client.
struct Link {
    client: reqwest::Client,
    tokens: Option<token::Tokens>,
}

impl Deliverer {
    /// One semaphore per distinct target (routes sharing a target share the smallest cap).
    /// HTTPS targets are verified against `ca_file` when given, else the system roots (see
    /// [`crate::trust`]); a route with a client certificate gets a client of its own.
    pub fn new(routes: &[Route], ca_file: Option<&std::path::Path>) -> Result<Self, String> {
        let mut caps: HashMap<Target, usize> = HashMap::new();
        for r in routes {
            let c = caps.entry(r.target.clone()).or_insert(r.max_concurrency);
            *c = (*c).min(r.max_concurrency);
        }
        let dir_syncs = caps.keys().map(|t| (t.clone(), DirSync::default())).collect();
        let limits = caps.into_iter().map(|(t, c)| (t, Arc::new(Semaphore::new(c)))).collect();
        let cas = ca_file
            .map(|f| crate::trust::ca_certificates("gateway.deliver_ca_file", f))
            .transpose()?;
        let build = |identity: Option<reqwest::Identity>| {
            let mut b = reqwest::Client::builder().timeout(HTTP_TIMEOUT);
            if let Some(cas) = &cas {
                b = b.tls_certs_only(cas.iter().cloned());
            }
            if let Some(id) = identity {
                b = b.identity(id);
            }
            b.build()
        };
        let client = build(None).map_err(|e| format!("http client: {e}"))?;
        let mut links = HashMap::new();
        for r in routes {
            let d = &r.delivery;
            if !matches!(r.target, Target::Http(_)) || links.contains_key(&r.name) {
                continue;
            }
            let own = match &d.identity {
                Some(id) => build(Some(id.clone())).map_err(|e| {
                    format!("[[gateway.route]] {}: delivery.client_cert: {e}", r.name)
                })?,
                None => client.clone(),
            };
            let tokens = match &d.auth {
                Some(Auth::OAuth2(o)) => Some(token::Tokens::new(o.clone(), own.clone())),
                _ => None,
            };
            links.insert(r.name.clone(), Link { client: own, tokens });
        }
        Ok(Self { client, links, limits, dir_syncs, simulated: false })
    }

    /// For a simulation: a `dir:` delivery succeeds without writing its file (the simulation
    /// would throw it away), after waiting for its concurrency slot as in the real pipeline.
    pub fn simulated(mut self) -> Self {
        self.simulated = true;
        self
    }

    /// Waits for one of `route`'s target's concurrency slots (`max_concurrency`). Taken
    /// before a parcel's bytes are read, so a slow target holds at most that many parcels in
    /// memory however many lanes wait for it.
    pub async fn slot(&self, route: &Route) -> Result<Slot, Attempt> {
        match self.limits.get(&route.target) {
            Some(sem) => match sem.clone().acquire_owned().await {
                Ok(p) => Ok(Slot { _permit: Some(p) }),
                Err(_) => Err(Attempt::Retry("delivery is shutting down".into())),
            },
            None => Ok(Slot { _permit: None }),
        }
    }

    /// Makes one attempt to hand `parcel` to `route`'s target in `slot` (see [`Self::slot`]).
    pub async fn deliver(&self, route: &Route, parcel: &Parcel, slot: Slot) -> Attempt {
        let _slot = slot;
        let target = &route.target;
        match target {
            Target::Dir(_) if self.simulated => Attempt::Done,
            Target::Dir(dir) => {
                let dir = dir.clone();
                let id = parcel.id.clone();
                let bytes = parcel.bytes.clone();
                let d2 = dir.clone();
                let write = move || write_into(&d2, &id, &bytes);
                match crate::blocking::off_runtime(false, write).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Attempt::Retry(e),
                    Err(e) => return Attempt::Retry(format!("delivery task failed: {e}")),
                }
                let synced = match self.dir_syncs.get(target) {
                    Some(ds) => ds.sync(&dir).await,
                    None => sync_dir(&dir).map_err(|e| e.to_string()),
                };
                match synced {
                    Ok(()) => Attempt::Done,
                    Err(e) => Attempt::Retry(e),
                }
            }
            Target::Http(url) => self.post(url.as_str(), route, parcel).await,
        }
    }

    /// POSTs `parcel` with the route's credentials; a 401 to a bearer token is tried once
    /// more with a new token.
    async fn post(&self, url: &str, route: &Route, parcel: &Parcel) -> Attempt {
        let link = self.links.get(&route.name);
        let client = link.map_or(&self.client, |l| &l.client);
        let tokens = link.and_then(|l| l.tokens.as_ref());
        let token = match tokens.map(|t| t.current()) {
            Some(fetch) => match fetch.await {
                Ok(t) => Some(t),
                Err(why) => return Attempt::Retry(why),
            },
            None => None,
        };
        let sent = send(client, url, route, parcel, token.as_ref()).await;
        if let (Some(tokens), Some(used), Ok(r)) = (tokens, &token, &sent)
            && r.status() == reqwest::StatusCode::UNAUTHORIZED
        {
            let fresh = match tokens.renew(used).await {
                Ok(t) => t,
                Err(why) => return Attempt::Retry(why),
            };
            let again = send(client, url, route, parcel, Some(&fresh)).await;
            return outcome(url, again, " to a token fetched again after a first 401").await;
        }
        outcome(url, sent, "").await
    }
}

/// One POST of `parcel` to `url` with `route`'s Content-Type, fixed headers and credentials
/// (`token` for an OAuth 2.0 route).
async fn send(
    client: &reqwest::Client,
    url: &str,
    route: &Route,
    parcel: &Parcel,
    token: Option<&token::Token>,
) -> reqwest::Result<reqwest::Response> {
    let d = &route.delivery;
    let mut req = client
        .post(url)
        .headers(d.headers.clone())
        .header(CONTENT_TYPE, d.content_type.clone())
        .header("Tollgate-Interchange-Id", &parcel.id)
        .header("Tollgate-Partner", header_safe(&parcel.partner))
        .header("Tollgate-Document", header_safe(&parcel.document));
    if let Some(Auth::Basic { user, password }) = &d.auth {
        req = req.basic_auth(user, Some(password.expose()));
    }
    if let Some(t) = token {
        req = req.header(AUTHORIZATION, t.header.clone());
    }
    req.body(parcel.bytes.clone()).send().await
}

/// The attempt an answer (or error) makes; `note` follows the status in a reason.
async fn outcome(url: &str, sent: reqwest::Result<reqwest::Response>, note: &str) -> Attempt {
    match sent {
        Ok(r) if r.status().is_success() => Attempt::Done,
        Ok(r) => {
            let status = r.status();
            let body = r.text().await.unwrap_or_default();
            let snippet: String = body.chars().take(200).collect();
            let reason = format!("{url} answered {status}{note}: {snippet}");
            if status.is_client_error() && status.as_u16() != 408 && status.as_u16() != 429 {
                Attempt::Refused(reason)
            } else {
                Attempt::Retry(reason)
            }
        }
        Err(e) if e.is_timeout() => Attempt::Retry(format!("{url} timed out: {e}")),
        Err(e) => Attempt::Retry(format!("{url}: {}", crate::trust::describe(&e))),
    }
}

/// Header values must be visible ASCII; anything else becomes `_`.
fn header_safe(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '_' }).collect()
}

/// Temp file, fsync, rename (the directory fsync follows, shared, in [`DirSync`]). The
/// directory is created only when the temp file cannot be: a `mkdir` per delivery would lock
/// the parent directory every time.
fn write_into(dir: &Path, id: &str, bytes: &[u8]) -> Result<(), String> {
    let tmp = dir.join(format!(".{id}.edi.tmp"));
    let dest = dir.join(format!("{id}.edi"));
    let write = || {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    };
    let written = match write() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            write()
        }
        other => other,
    };
    let done = written.map_err(|e| format!("{}: {e}", tmp.display())).and_then(|()| {
        std::fs::rename(&tmp, &dest).map_err(|e| format!("{}: {e}", dest.display()))
    });
    if done.is_err() {
        // A partial (or empty) temp file must not stay: on a full disk it would hold the space
        // the retry needs.
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(backoff(1), Duration::from_millis(100));
        assert_eq!(backoff(2), Duration::from_millis(200));
        assert_eq!(backoff(4), Duration::from_millis(800));
        assert_eq!(backoff(30), MAX_BACKOFF);
    }

    #[tokio::test]
    async fn dir_delivery_is_atomic_and_named_by_id() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let config: crate::GatewayConfig = toml::from_str(&format!(
            "[[route]]\nname = \"S\"\ndocuments = [\"214\"]\nlimit = 1\nunit = \"day\"\n\
             deliver = \"dir:{}\"\n",
            out.display()
        ))
        .unwrap();
        let plan = config.plan().unwrap();
        let route = &plan.routes[0];
        let d = Deliverer::new(&plan.routes, None).unwrap();
        let p = Parcel {
            id: "a-1".into(),
            partner: "P".into(),
            document: "214".into(),
            bytes: b"ISA".to_vec(),
        };
        assert_eq!(d.deliver(route, &p, d.slot(route).await.unwrap()).await, Attempt::Done);
        assert_eq!(d.deliver(route, &p, d.slot(route).await.unwrap()).await, Attempt::Done);
        let names: Vec<_> =
            std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a-1.edi")]);
        assert_eq!(std::fs::read(out.join("a-1.edi")).unwrap(), b"ISA");
    }
}
