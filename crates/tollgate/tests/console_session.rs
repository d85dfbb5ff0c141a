//! The console's login, session and headers through its router (no browser): a token makes a
//! session cookie, the admin API takes the cookie only with its CSRF token, logout ends it, and
//! every answer carries the content security policy.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use tollgate_console::Console;
use tollgate_http::AccessGuard;
use tollgate_policy::PolicySet;
use tollgate_quota::AnyStore;
use tollgate_quota::store::MemoryStore;
use tollgate_server::AppState;
use tollgate_server::Policies;
use tower::ServiceExt;

fn app(guard: AccessGuard) -> axum::Router {
    let store = Arc::new(AnyStore::Memory(MemoryStore::new()));
    let state = AppState::builder(store, Policies::fixed(PolicySet::default()), guard).build();
    let console = Console::new(state.admin().clone(), state.decider().clone(), false, Vec::new());
    tollgate_server::router(state).merge(console.router())
}

async fn send(
    app: &axum::Router,
    req: Request<Body>,
) -> (StatusCode, axum::http::HeaderMap, String) {
    let res = app.clone().oneshot(req).await.unwrap();
    let (parts, body) = res.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    (parts.status, parts.headers, String::from_utf8_lossy(&bytes).into_owned())
}

fn get(path: &str, cookie: Option<&str>, csrf: Option<&str>) -> Request<Body> {
    let mut b = Request::get(path);
    if let Some(c) = cookie {
        b = b.header("cookie", c);
    }
    if let Some(t) = csrf {
        b = b.header("x-csrf-token", t);
    }
    b.body(Body::empty()).unwrap()
}

#[tokio::test]
async fn a_login_makes_a_session_that_the_api_accepts_with_its_csrf_token() {
    let app = app(AccessGuard::new(Some("root-token"), false));
    let (status, headers, _) = send(&app, get("/", None, None)).await;
    assert_eq!((status, headers["location"].to_str().unwrap()), (StatusCode::SEE_OTHER, "/ui/"));
    let (status, headers, body) = send(&app, get("/ui/", None, None)).await;
    assert_eq!(status, StatusCode::OK);
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"));
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert!(!body.contains("root-token"));
    assert_eq!(send(&app, get("/ui/api/session", None, None)).await.0, StatusCode::UNAUTHORIZED);

    let login = |token: &str| {
        Request::post("/ui/login")
            .header("content-type", "application/json")
            .body(Body::from(format!("{{\"token\":\"{token}\"}}")))
            .unwrap()
    };
    let (status, _, body) = send(&app, login("wrong")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let (status, headers, body) = send(&app, login("root-token")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let set = headers["set-cookie"].to_str().unwrap().to_owned();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=28800"] {
        assert!(set.contains(part), "{set}");
    }
    assert!(!set.contains("Secure"), "plain HTTP: {set}");
    let cookie = set.split(';').next().unwrap().to_owned();
    let csrf = serde_json::from_str::<serde_json::Value>(&body).unwrap()["csrf"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(csrf.len(), 64);

    // The admin API: the cookie counts only with the CSRF token.
    let (status, _, body) = send(&app, get("/v1/policies", Some(&cookie), None)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("csrf-token-required"), "{body}");
    let (status, _, _) =
        send(&app, get("/v1/policies", Some(&cookie), Some("0".repeat(64).as_str()))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(send(&app, get("/v1/policies", Some(&cookie), Some(&csrf))).await.0, StatusCode::OK);
    let (status, _, body) = send(&app, get("/ui/api/overview", Some(&cookie), Some(&csrf))).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Logout needs the token too, then the session is gone.
    let logout = |csrf: Option<&str>| {
        let mut b = Request::post("/ui/logout").header("cookie", cookie.clone());
        if let Some(t) = csrf {
            b = b.header("x-csrf-token", t);
        }
        b.body(Body::empty()).unwrap()
    };
    assert_eq!(send(&app, logout(None)).await.0, StatusCode::FORBIDDEN);
    let (status, headers, _) = send(&app, logout(Some(&csrf))).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(headers["set-cookie"].to_str().unwrap().contains("Max-Age=0"));
    let (status, _, _) = send(&app, get("/v1/policies", Some(&cookie), Some(&csrf))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn without_credentials_the_console_is_open_on_loopback_only() {
    let open = app(AccessGuard::new(None, true));
    let (status, _, body) = send(&open, get("/ui/api/session", None, None)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("\"open\":true") && body.contains("\"name\":\"loopback\""), "{body}");
    let closed = app(AccessGuard::new(None, false));
    assert_eq!(send(&closed, get("/ui/api/overview", None, None)).await.0, StatusCode::FORBIDDEN);
    let login = Request::post("/ui/login").body(Body::from("{\"token\":\"x\"}")).unwrap();
    assert_eq!(send(&closed, login).await.0, StatusCode::FORBIDDEN);
}
