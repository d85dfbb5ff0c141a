//! The admin API as the command line calls it: where the service is, the bearer token, and
//! one request with its problem+json refusals turned into a one-line error.
//!
//! `tollgate counters` and `tollgate queue` are thin layers over this.

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::Method;
use serde_json::Value;

/// `--url` and `--token` of every admin subcommand.
#[derive(Debug, clap::Args)]
pub struct AdminTarget {
    /// Base URL of the running `tollgate serve`.
    #[arg(long, global = true, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Admin bearer token (none is needed against a loopback server without one).
    #[arg(long, global = true, env = "TOLLGATE_ADMIN_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

impl AdminTarget {
    /// Sends `method path_and_query` and returns the answer's body; a refusal (non-2xx) becomes
    /// an error with the status and the problem's title and detail.
    pub async fn send(&self, method: Method, path_and_query: &str) -> anyhow::Result<String> {
        self.send_within(method, path_and_query, Duration::from_secs(30)).await
    }

    /// [`AdminTarget::send`] waiting up to `timeout` for the answer.
    pub async fn send_within(
        &self,
        method: Method,
        path_and_query: &str,
        timeout: Duration,
    ) -> anyhow::Result<String> {
        self.send_page(method, path_and_query, timeout).await.map(|(body, _)| body)
    }

    /// `GET path_and_query` and every next page its `Link: <…>; rel="next"` headers name, the
    /// JSON arrays joined into one (at most `MAX_PAGES` pages).
    pub async fn get_all(&self, path_and_query: &str) -> anyhow::Result<Vec<Value>> {
        const MAX_PAGES: usize = 10_000;
        let mut all = Vec::new();
        let mut next = Some(path_and_query.to_owned());
        for _ in 0..MAX_PAGES {
            let Some(path) = next.take() else { break };
            let (body, link) = self.send_page(Method::GET, &path, Duration::from_secs(30)).await?;
            match serde_json::from_str::<Value>(&body) {
                Ok(Value::Array(rows)) => all.extend(rows),
                _ => bail!("unexpected answer: {body}"),
            }
            next = link;
        }
        Ok(all)
    }

    /// One request: the body, and the path of the next page when a `Link` header names one.
    async fn send_page(
        &self,
        method: Method,
        path_and_query: &str,
        timeout: Duration,
    ) -> anyhow::Result<(String, Option<String>)> {
        let base = self.url.trim_end_matches('/');
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(timeout)
            .build()
            .context("building the HTTP client")?;
        let mut req = client.request(method, format!("{base}{path_and_query}"));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.with_context(|| format!("cannot reach {base}"))?;
        let status = resp.status();
        let next =
            resp.headers().get(reqwest::header::LINK).and_then(|v| next_link(v.to_str().ok()?));
        let text = resp.text().await.with_context(|| format!("reading the answer of {base}"))?;
        if !status.is_success() {
            bail!("{status}: {}", problem_summary(&text));
        }
        Ok((text, next))
    }
}

/// The target of the `rel="next"` link of a `Link` header, when it is a path on this server.
fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|link| {
        let (target, params) = link.trim().split_once(';')?;
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        let next = params.split(';').any(|p| p.trim() == "rel=\"next\"");
        (next && target.starts_with('/')).then(|| target.to_owned())
    })
}

/// "title: detail" of a problem+json body, or the body itself when it is not one.
fn problem_summary(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|p| {
            let title = p["title"].as_str()?.to_owned();
            Some(match p["detail"].as_str() {
                Some(d) => format!("{title}: {d}"),
                None => title,
            })
        })
        .unwrap_or_else(|| body.to_owned())
}

/// Percent-encodes an id for a path segment or query value (keeps unreserved characters and
/// `:`, so `ShipmentStatus:CarrierXYZ` stays readable in logs).
pub fn encode_segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Runs one admin command on a single-threaded runtime: exit 0 when it succeeds, 1 with a
/// one-line `tollgate NAME: error` otherwise.
pub fn run(name: &str, command: impl Future<Output = anyhow::Result<()>>) -> ExitCode {
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")
        .and_then(|rt| rt.block_on(command));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tollgate {name}: {e:#}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_encoded_for_a_path_segment() {
        assert_eq!(encode_segment("ShipmentStatus:Carrier-1"), "ShipmentStatus:Carrier-1");
        assert_eq!(encode_segment("a/b?c#d%"), "a%2Fb%3Fc%23d%25");
    }

    #[test]
    fn the_next_page_is_read_from_a_link_header() {
        let h = r#"</v1/queue?limit=2&cursor=a-1>; rel="next""#;
        assert_eq!(next_link(h).as_deref(), Some("/v1/queue?limit=2&cursor=a-1"));
        assert_eq!(next_link(r#"</x>; rel="prev", </y>; rel="next""#).as_deref(), Some("/y"));
        assert_eq!(next_link(r#"<http://elsewhere/x>; rel="next""#), None);
        assert_eq!(next_link("garbage"), None);
    }

    #[test]
    fn problems_are_summarised_by_title_and_detail() {
        let body = r#"{"title":"Unauthorized","detail":"bearer token missing","status":401}"#;
        assert_eq!(problem_summary(body), "Unauthorized: bearer token missing");
        assert_eq!(problem_summary("plain text"), "plain text");
    }
}
