//! `GET /openapi.json`: the OpenAPI 3.1 description of what this `tollgate serve` serves, merged
//! from the annotations beside the handlers of the server, the gateway (when configured) and
//! this binary, and built once at start.

use axum::Router;
use axum::http::header::{CONTENT_TYPE, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use utoipa::OpenApi;
use utoipa::openapi::OpenApi as Document;

#[derive(OpenApi)]
#[openapi(paths(crate::backup::route, crate::notifications::test, describe))]
struct BinaryApi;

/// The description of the routes served: the server's, the gateway's when `gateway`, and
/// the binary's own.
pub fn document(gateway: bool) -> Document {
    let mut doc = tollgate_server::openapi::document();
    if gateway {
        doc.merge(tollgate_gateway::Gateway::openapi());
    }
    doc.merge(BinaryApi::openapi());
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    tollgate_server::openapi::finish(doc)
}

/// The `/openapi.json` route, answering `doc`.
pub fn router(doc: &Document) -> Router {
    let body = axum::body::Bytes::from(doc.to_json().unwrap_or_else(|_| "{}".to_owned()));
    Router::new().route("/openapi.json", get(move || describe(body.clone())))
}

/// `GET /openapi.json`.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    operation_id = "openapi",
    summary = "This description (OpenAPI 3.1)",
    responses((status = 200, description = "The OpenAPI document.", body = Object)),
)]
async fn describe(body: axum::body::Bytes) -> Response {
    let mut r = body.into_response();
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}
