//! The two ways to `GET /v1/quota`: an [`App`] hands it to the quota route beside the router,
//! a bare router matches it like any route. Both must count on the same counters, answer
//! alike, and run every layer the app was given.

mod common;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{Next, from_fn, map_response};
use axum::response::{IntoResponse, Response};
use common::{Options, Server};
use serde_json::Value;
use tollgate_quota::{CounterListing, Store};
use tollgate_server::{App, ConnectionLimits, router};

const CHECK: &[(&str, &str)] = &[
    ("metering-id", "ORDERS:ACME"),
    ("quota-limit", "3"),
    ("quota-interval", "1"),
    ("quota-timeunit", "day"),
];

/// Adds `x-layer: seen` to every answer that passes through it.
async fn mark(mut response: Response) -> Response {
    response.headers_mut().insert("x-layer", HeaderValue::from_static("seen"));
    response
}

/// Answers every request itself with 418, without calling what it wraps.
async fn refuse(_: Request, _: Next) -> Response {
    StatusCode::IM_A_TEAPOT.into_response()
}

#[tokio::test]
async fn the_quota_route_and_the_router_count_on_one_counter_and_answer_alike() {
    let (state, clock) = Server::state(Options::default());
    let fast = Server::serving(
        App::new(state.clone()),
        state.clone(),
        clock.clone(),
        ConnectionLimits::default(),
    )
    .await;
    let plain =
        Server::serving(router(state.clone()), state, clock, ConnectionLimits::default()).await;

    let mut answers = Vec::new();
    for (i, s) in [&fast, &plain, &fast, &plain].into_iter().enumerate() {
        let r = s.quota(CHECK).await;
        let status = r.status();
        let headers: Vec<(String, String)> = r
            .headers()
            .iter()
            .filter(|(n, _)| *n != "date")
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        let body: Value = r.json().await.unwrap();
        answers.push((status, headers, body.clone()));
        // One counter behind both: the 4th check is over the limit of 3, wherever it came.
        let expect_used = (i as u64 + 1).min(3);
        assert_eq!(body["used"], expect_used, "check {i}: {body}");
        assert_eq!(status, if i < 3 { 200 } else { 429 }, "check {i}");
    }
    // The same answer, header for header, from either path (only the counts differ).
    let names = |a: &(StatusCode, Vec<(String, String)>, Value)| {
        a.1.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>()
    };
    assert_eq!(names(&answers[0]), names(&answers[1]));
    assert_eq!(
        answers[0].1,
        vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            ("ratelimit-policy".to_owned(), "\"q\";q=3;w=86400".to_owned()),
            ("ratelimit".to_owned(), "\"q\";r=2;t=50400".to_owned()),
            ("content-length".to_owned(), answers[0].1[3].1.clone()),
        ]
    );
    assert_eq!(answers[1].1[2], ("ratelimit".to_owned(), "\"q\";r=1;t=50400".to_owned()));
}

#[tokio::test]
async fn a_layer_given_to_the_app_runs_on_the_quota_route_and_on_every_other() {
    let (state, clock) = Server::state(Options::default());
    let app = App::new(state.clone()).layer(map_response(mark));
    let s = Server::serving(app, state, clock, ConnectionLimits::default()).await;

    let r = s.quota(CHECK).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-layer"], "seen", "GET /v1/quota");
    for (method, path) in [("HEAD", "/v1/quota"), ("GET", "/healthz"), ("GET", "/nowhere")] {
        let r = s.http.request(method.parse().unwrap(), s.url(path)).send().await.unwrap();
        assert_eq!(
            r.headers().get("x-layer").map(|v| v.to_str().unwrap()),
            Some("seen"),
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn a_layer_that_answers_itself_keeps_the_quota_check_from_counting() {
    let (state, clock) = Server::state(Options::default());
    let app = App::new(state.clone()).layer(from_fn(refuse));
    let s = Server::serving(app, state.clone(), clock, ConnectionLimits::default()).await;
    for _ in 0..2 {
        assert_eq!(s.quota(CHECK).await.status(), StatusCode::IM_A_TEAPOT);
    }
    let counters = state.store().counters(&CounterListing::all("")).await.unwrap().counters;
    assert!(counters.is_empty(), "the handler ran behind the layer: {counters:?}");
}
