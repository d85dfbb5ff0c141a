//! HTTPS on a real `tollgate serve`: quota calls over TLS with certificates made at test
//! time, a broken pair refused at start-up (exit 2, the file and why), a client that opens TCP
//! and sends nothing freed by the header timeout, a rotation under load with no failed
//! request, a broken rotation that keeps the old certificate (and shows in `/readyz`), and
//! client certificates (mTLS) accepted and refused.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Server, exit_within};
use serde_json::Value;
use tollgate_testkit::tls::{Pem, TestCa, replace};

/// A client trusting only `ca`, one connection per request (so a rotated certificate is seen
/// by the next request), reporting the server certificate it got.
fn client(ca: &TestCa, identity: Option<&Pem>) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(ca.cert.as_bytes()).unwrap();
    let mut b = reqwest::Client::builder()
        .tls_certs_only([ca])
        .tls_info(true)
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10));
    if let Some(id) = identity {
        b = b.identity(
            reqwest::Identity::from_pem(format!("{}{}", id.cert, id.key).as_bytes()).unwrap(),
        );
    }
    b.build().unwrap()
}

/// `GET /v1/quota` for `id`: the status and the common name of the server's certificate.
async fn quota(c: &reqwest::Client, url: &str, id: &str) -> reqwest::Result<(u16, String)> {
    let r = c
        .get(format!("{url}/v1/quota"))
        .header("metering-id", id)
        .header("quota-limit", "1000000")
        .header("quota-timeunit", "day")
        .send()
        .await?;
    let subject = r
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate())
        .and_then(tollgate_http::tls::subject::of)
        .unwrap_or_default();
    Ok((r.status().as_u16(), subject))
}

async fn readyz(c: &reqwest::Client, url: &str) -> Value {
    c.get(format!("{url}/readyz")).send().await.unwrap().json().await.unwrap()
}

fn serve_tls(cert: &Path, key: &Path, extra: &[&str]) -> Server {
    let mut args = vec![
        "--store",
        "memory",
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    Server::start(&args)
}

#[tokio::test]
async fn quota_calls_over_https() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("Test CA");
    let (cert, key) = ca.server("gen-1").write(dir.path(), "server");
    let s = serve_tls(&cert, &key, &[]);
    assert!(s.url.starts_with("https://"), "{}", s.url);
    let c = client(&ca, None);
    assert_eq!(quota(&c, &s.url, "Tls:1").await.unwrap(), (200, "CN=gen-1".to_owned()));
    let r = readyz(&c, &s.url).await;
    assert_eq!(r["status"], "ready", "{r}");
    assert_eq!(r["tls"]["generation"], 1, "{r}");
    // A problem+json rewrite still happens over TLS (404 from the router).
    let r = c.get(format!("{}/nope", s.url)).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    // Plain HTTP on the TLS port gets no answer but a closed connection, not a hang.
    {
        use std::io::{Read, Write};
        let mut raw = std::net::TcpStream::connect(&s.addr).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = raw.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n");
        let mut answer = Vec::new();
        let _ = raw.read_to_end(&mut answer);
        assert!(!answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    }
    // `tollgate check` over HTTPS, trusting the CA given by --ca-file.
    let ca_file = ca.write(dir.path(), "ca");
    let o = exit_within(
        &[
            "check",
            "--url",
            &s.url,
            "--id",
            "Tls:2",
            "--limit",
            "5",
            "--unit",
            "day",
            "--ca-file",
            ca_file.to_str().unwrap(),
        ],
        Duration::from_secs(20),
    );
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    // A client that does not trust the CA refuses the server.
    let other = client(&TestCa::new("Other CA"), None);
    let e = quota(&other, &s.url, "Tls:1").await.unwrap_err();
    assert!(format!("{e:?}").contains("UnknownIssuer"), "{e:?}");
}

#[test]
fn a_broken_pair_is_a_start_up_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("Test CA");
    let (cert, key) = ca.server("a").write(dir.path(), "a");
    let (_, other_key) = ca.server("b").write(dir.path(), "b");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let missing = dir.path().join("missing.pem");
    let p = |p: &Path| p.to_str().unwrap().to_owned();
    for (c, k, needle) in [
        (
            p(&cert),
            p(&other_key),
            "tls_key = ".to_owned()
                + &format!("{:?}", other_key)
                + ": the key does not match the certificate",
        ),
        (p(&garbage), p(&key), format!("tls_cert = {garbage:?}: no CERTIFICATE block")),
        (p(&cert), p(&garbage), format!("tls_key = {garbage:?}: no private key")),
        (p(&missing), p(&key), format!("tls_cert = {missing:?}: cannot read")),
    ] {
        let o = exit_within(
            &[
                "serve",
                "--store",
                "memory",
                "--listen",
                "127.0.0.1:0",
                "--tls-cert",
                &c,
                "--tls-key",
                &k,
            ],
            Duration::from_secs(20),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(&needle), "{needle} not in {err}");
    }
    // Half a pair in the file is a config error.
    let conf = dir.path().join("t.toml");
    std::fs::write(&conf, format!("[server]\ntls_cert = {:?}\n", p(&cert))).unwrap();
    let o = exit_within(&["serve", "--config", conf.to_str().unwrap()], Duration::from_secs(20));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("a TLS certificate is set but no key"),
        "{o:?}"
    );
}

#[test]
fn a_client_silent_before_the_handshake_is_freed_by_the_header_timeout() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("Test CA");
    let (cert, key) = ca.server("a").write(dir.path(), "server");
    let conf = dir.path().join("t.toml");
    std::fs::write(&conf, "[server]\nheader_timeout_ms = 300\n").unwrap();
    let s = serve_tls(&cert, &key, &["--config", conf.to_str().unwrap()]);
    let mut c = std::net::TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 64];
    let n = c.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the server closes without a word");
    assert!(start.elapsed() < Duration::from_secs(5), "freed after {:?}", start.elapsed());
}

/// Requests in a loop until `stop`, each from a new client (a new connection with a full
/// handshake: a client that resumes a TLS session keeps the certificate of that session);
/// counts successes and failures and the certificate names seen.
fn load(
    ca: Arc<TestCa>,
    url: String,
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<std::sync::Mutex<Vec<String>>>,
    seen: Arc<std::sync::Mutex<Vec<String>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            let c = client(&ca, None);
            match quota(&c, &url, "Rot:1").await {
                Ok((200, cn)) => {
                    ok.fetch_add(1, Ordering::Relaxed);
                    let mut seen = seen.lock().unwrap();
                    if seen.last() != Some(&cn) {
                        seen.push(cn);
                    }
                }
                Ok((status, _)) => failed.lock().unwrap().push(format!("status {status}")),
                Err(e) => failed.lock().unwrap().push(format!("{e:?}")),
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_under_load_fails_no_request_and_new_connections_get_the_new_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Arc::new(TestCa::new("Test CA"));
    let (cert, key) = ca.server("gen-1").write(dir.path(), "server");
    let s = serve_tls(&cert, &key, &[]);
    let c = client(&ca, None);
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            load(ca.clone(), s.url.clone(), stop.clone(), ok.clone(), failed.clone(), seen.clone())
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Rotate twice, each file replaced atomically by a rename.
    for generation in ["gen-2", "gen-3"] {
        let next = ca.server(generation);
        replace(&cert, next.cert.as_bytes());
        replace(&key, next.key.as_bytes());
        let deadline = Instant::now() + Duration::from_secs(10);
        while seen.lock().unwrap().last().is_none_or(|cn| cn != &format!("CN={generation}")) {
            assert!(
                Instant::now() < deadline,
                "{generation} never served: {:?}",
                seen.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let failed = failed.lock().unwrap().clone();
    assert!(failed.is_empty(), "{} failed: {:?}", failed.len(), &failed[..failed.len().min(5)]);
    let seen = seen.lock().unwrap().clone();
    assert!(seen.ends_with(&["CN=gen-3".to_owned()]), "{seen:?}");
    assert!(seen.contains(&"CN=gen-2".to_owned()), "{seen:?}");
    let n = ok.load(Ordering::Relaxed);
    assert!(n > 20, "only {n} requests");
    eprintln!("rotation under load: {n} requests, 0 failed, certificates seen in order: {seen:?}");
    let r = readyz(&c, &s.url).await;
    assert_eq!(r["tls"]["generation"], 3, "{r}");
    assert_eq!(r["tls"]["last_error"], Value::Null, "{r}");
}

#[tokio::test]
async fn a_broken_rotation_keeps_the_old_certificate_and_shows_in_readyz() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("Test CA");
    let (cert, key) = ca.server("gen-1").write(dir.path(), "server");
    let s = serve_tls(&cert, &key, &[]);
    let c = client(&ca, None);
    // A key that does not match the certificate.
    replace(&key, ca.server("other").key.as_bytes());
    let deadline = Instant::now() + Duration::from_secs(10);
    let r = loop {
        let r = readyz(&c, &s.url).await;
        if !r["tls"]["last_error"].is_null() || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let err = r["tls"]["last_error"].as_str().unwrap_or_default();
    assert!(err.contains("tls_key = ") && err.contains("does not match"), "{r}");
    assert!(err.contains(key.to_str().unwrap()), "{r}");
    assert_eq!(r["status"], "degraded", "{r}");
    assert_eq!(r["tls"]["generation"], 1, "{r}");
    // The old certificate is still served, on new connections too (new clients: no resumed
    // sessions).
    assert_eq!(
        quota(&client(&ca, None), &s.url, "Tls:1").await.unwrap(),
        (200, "CN=gen-1".to_owned())
    );
    // Garbage is refused the same way.
    replace(&cert, b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        quota(&client(&ca, None), &s.url, "Tls:1").await.unwrap(),
        (200, "CN=gen-1".to_owned())
    );
    let metrics = c.get(format!("{}/metrics", s.url)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("tollgate_tls_reload_errors_total"), "{metrics}");
    // A good pair clears the error.
    let good = ca.server("gen-2");
    replace(&cert, good.cert.as_bytes());
    replace(&key, good.key.as_bytes());
    let deadline = Instant::now() + Duration::from_secs(10);
    let r = loop {
        let r = readyz(&c, &s.url).await;
        if r["tls"]["generation"] == 2 || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(r["tls"]["last_error"], Value::Null, "{r}");
    assert_eq!(r["status"], "ready", "{r}");
    let metrics = c.get(format!("{}/metrics", s.url)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("tollgate_tls_reloads_total 1"), "{metrics}");
    assert_eq!(
        quota(&client(&ca, None), &s.url, "Tls:1").await.unwrap(),
        (200, "CN=gen-2".to_owned())
    );
}

#[tokio::test]
async fn client_certificates_signed_by_the_client_ca_are_required() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("Server CA");
    let clients = TestCa::new("Client CA");
    let (cert, key) = ca.server("srv").write(dir.path(), "server");
    let client_ca = clients.write(dir.path(), "client-ca");
    let conf = dir.path().join("t.toml");
    let clients_toml = format!(
        "[server]\ntls_client_ca = {:?}\n\n[[client]]\nname = \"partner-a\"\nsubject = \"CN=partner-a\"\nallow = [\"M:*\"]\n\n[[client]]\nname = \"ops\"\nkey = \"k-ops\"\n",
        client_ca.to_str().unwrap()
    );
    // With a gateway, so uploads are checked too.
    let toml =
        common::gateway_toml(&dir.path().join("in"), &dir.path().join("out"), "", &clients_toml);
    std::fs::create_dir_all(dir.path().join("in")).unwrap();
    std::fs::write(&conf, toml).unwrap();
    let data = dir.path().join("data");
    let s = serve_tls(
        &cert,
        &key,
        &["--config", conf.to_str().unwrap(), "--data", data.to_str().unwrap()],
    );
    let good = clients.client("partner-a");
    assert_eq!(quota(&client(&ca, Some(&good)), &s.url, "M:1").await.unwrap().0, 200);
    // No certificate, or one from another CA: the handshake fails.
    let e = quota(&client(&ca, None), &s.url, "M:1").await.unwrap_err();
    assert!(e.is_connect() || e.is_request(), "{e:?}");
    let stranger = TestCa::new("Other CA").client("partner-a");
    let e = quota(&client(&ca, Some(&stranger)), &s.url, "M:1").await.unwrap_err();
    assert!(e.is_connect() || e.is_request(), "{e:?}");

    // The certificate's subject names the client: its allow globs apply.
    assert_eq!(quota(&client(&ca, Some(&good)), &s.url, "Other:1").await.unwrap().0, 403);
    // A verified certificate whose subject no client names: 401 naming the subject.
    let unnamed = client(&ca, Some(&clients.client("partner-b")));
    let r = unnamed.get(format!("{}/v1/quota", s.url)).header("metering-id", "M:1").send().await;
    let r = r.unwrap();
    assert_eq!(r.status(), 401);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["subject"], "CN=partner-b", "{body}");
    // Uploads: the certificate's client may upload; one no client names may not.
    let edi = tollgate_testkit::Status214::new("CARRIERA", 1).build();
    let up = |c: reqwest::Client| {
        let url = format!("{}/v1/interchanges", s.url);
        let edi = edi.clone();
        async move { c.post(url).body(edi).send().await.unwrap().status().as_u16() }
    };
    assert_eq!(up(client(&ca, Some(&good))).await, 202);
    assert_eq!(up(unnamed.clone()).await, 401);
    // An API key decides when one is sent.
    let r = unnamed
        .get(format!("{}/v1/quota", s.url))
        .header("metering-id", "Other:1")
        .header("quota-limit", "10")
        .header("quota-timeunit", "day")
        .header("x-api-key", "k-ops")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
