//! `GET /openapi.json` against the routes a live `tollgate serve` (embedded store, a
//! `[gateway]`) actually serves.
//!
//! The served routes are found where they are declared: every `.route("PATH", METHOD(…)…)` in
//! the crates' `src/` trees, so a route added anywhere is compared without editing this test.
//! Each is then asked on the live server, which must not answer with the router's own 404 or
//! 405 (a route declared but not mounted fails too). The test fails with the lists of
//! undocumented routes (served, not in the document) and phantom ones (documented, not served).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::{Server, gateway_toml};

/// Paths the document leaves out on purpose, with why.
fn excluded(path: &str) -> bool {
    // The web console (`/` and `/ui/*`) serves HTML pages for people, not an API: it is not
    // part of the OpenAPI description.
    path == "/" || path == "/ui" || path.starts_with("/ui/")
}

/// The crates whose `src/` declare HTTP routes.
const ROUTE_SOURCES: &[&str] =
    &["crates/tollgate-server/src", "crates/tollgate-gateway/src", "crates/tollgate/src"];

const METHODS: &[&str] = &["get", "post", "put", "delete", "patch", "head", "options", "trace"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text of the call's arguments: from just after `(` to its matching `)`.
fn call_arguments(text: &str) -> &str {
    let mut depth = 1;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &text[..i];
                }
            }
            _ => {}
        }
    }
    text
}

/// `(METHOD, path)` of every `.route(…)` in `text`; `{*rest}` is written `{rest}` as in
/// OpenAPI. A route whose methods cannot be read fails the test, naming it.
fn declared_routes(file: &Path, text: &str, out: &mut BTreeSet<(String, String)>) {
    for marker in [".nest(", ".nest_service(", ".route_service(", ".fallback_service("] {
        assert!(
            !text.contains(marker),
            "{}: `{marker}` mounts routes this test cannot read; extend declared_routes",
            file.display()
        );
    }
    for (at, _) in text.match_indices(".route(") {
        let args = call_arguments(&text[at + ".route(".len()..]);
        let Some(path) = args.trim_start().strip_prefix('"').and_then(|s| s.split('"').next())
        else {
            panic!("{}: a .route( without a literal path: {args}", file.display());
        };
        let path = path.replace("{*", "{");
        let mut found = false;
        for m in METHODS {
            for (i, _) in args.match_indices(&format!("{m}(")) {
                let before = args[..i].chars().next_back();
                if before.is_none_or(|c| !(c.is_alphanumeric() || c == '_')) {
                    out.insert((m.to_uppercase(), path.clone()));
                    found = true;
                }
            }
        }
        assert!(found, "{}: no method found in .route({args})", file.display());
    }
}

fn served_in_source() -> BTreeSet<(String, String)> {
    let mut files = Vec::new();
    for dir in ROUTE_SOURCES {
        rust_files(&workspace().join(dir), &mut files);
    }
    let mut routes = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        declared_routes(&f, &text, &mut routes);
    }
    routes.into_iter().filter(|(_, p)| !excluded(p)).collect()
}

/// One request on a fresh connection: the status and the body.
fn request(addr: &str, method: &str, path: &str) -> (u16, String) {
    let m = common::request_at(addr, method, path, &[], b"");
    (m.status, m.text())
}

/// `tollgate serve` with a gateway (so its routes are mounted) on `store`, everything in `dir`:
/// the gateway keeps its spool in the data directory, a temp one, never the source tree.
fn serve_gateway(dir: &std::path::Path, store: &str) -> Server {
    let (landing, out) = (dir.join("in"), dir.join("out"));
    let config = dir.join("tollgate.toml");
    std::fs::write(&config, gateway_toml(&landing, &out, "", "")).unwrap();
    let data = dir.join("data");
    Server::start(&[
        "--store",
        store,
        "--data",
        data.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ])
}

#[test]
fn the_document_lists_exactly_the_routes_served() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve_gateway(dir.path(), "embedded");

    let (status, body) = request(&server.addr, "GET", "/openapi.json");
    assert_eq!(status, 200, "{body}");
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().unwrap().keys() {
            if METHODS.contains(&method.as_str()) {
                documented.insert((method.to_uppercase(), path.clone()));
            }
        }
    }

    let served = served_in_source();
    assert!(served.len() >= 15, "too few routes found in the sources: {served:?}");
    // Each declared route is really mounted: the router's own 404 / 405 would say otherwise.
    let mut not_mounted = Vec::new();
    for (method, path) in &served {
        let concrete = path.replace("{id}", "no-such-id");
        let (status, body) = request(&server.addr, method, &concrete);
        let routerless = (status == 404 && body.contains("/problems/not-found\""))
            || (status == 405 && body.contains("/problems/method-not-allowed\""));
        if routerless {
            not_mounted.push(format!("{method} {path} ({status})"));
        }
    }
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let phantom: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty() && phantom.is_empty() && not_mounted.is_empty(),
        "/openapi.json does not match the routes served:\n  undocumented (served, not in the \
         document): {undocumented:?}\n  phantom (documented, not served): {phantom:?}\n  \
         declared in the sources but not mounted: {not_mounted:?}"
    );
}

#[test]
fn every_operation_documents_its_problems_and_the_schemes_exist() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve_gateway(dir.path(), "memory");
    let (_, body) = request(&server.addr, "GET", "/openapi.json");
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
    assert_eq!(schemes["admin_token"]["scheme"], "bearer");
    assert_eq!(schemes["api_key"]["name"], "x-api-key");
    assert_eq!(schemes["api_key"]["in"], "header");
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let responses = op["responses"].as_object().unwrap();
            for code in ["414", "431"] {
                let content = &responses[code]["content"]["application/problem+json"];
                assert!(content.is_object(), "{method} {path} lacks the problem {code}");
            }
            for (code, r) in responses {
                // /readyz answers 503 with its readiness report, not a problem.
                if path == "/readyz" {
                    continue;
                }
                if code.starts_with('4') || code.starts_with('5') {
                    assert!(
                        r["content"].get("application/problem+json").is_some(),
                        "{method} {path} {code} is not a problem"
                    );
                }
            }
        }
    }
    let quota = &doc["paths"]["/v1/quota"]["get"];
    let headers: Vec<&str> = quota["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for h in [
        "metering-id",
        "quota-limit",
        "quota-interval",
        "quota-timeunit",
        "quota-window",
        "quota-start",
        "message-weight",
    ] {
        assert!(headers.contains(&h), "/v1/quota does not describe {h}: {headers:?}");
    }
    let answered = quota["responses"]["429"]["headers"].as_object().unwrap();
    for h in ["RateLimit", "RateLimit-Policy", "Retry-After"] {
        assert!(answered.contains_key(h), "429 lacks {h}");
    }
    assert!(doc["paths"]["/v1/queue"]["get"]["responses"]["200"]["headers"]["Link"].is_object());
}
