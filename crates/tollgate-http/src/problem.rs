//! Error answers as RFC 9457 problem details (`application/problem+json`).
//!
//! Every error the service gives, from a bad header to an unknown path, is a [`Problem`]: a
//! stable `type` URI a client can switch on, a fixed `title`, the `status` (always equal to the
//! response's status code), an occurrence-specific `detail`, and extension members such as
//! `invalid_header` and `value` that name what was wrong.

use axum::http::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

/// The media type of every problem body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Where problem type URIs live; the slug is appended.
pub const TYPE_BASE: &str = "https://tollgate.dev/problems/";

/// An RFC 9457 problem: built with [`Problem::new`] and refined builder-style.
///
/// ```
/// use axum::http::StatusCode;
/// use tollgate_http::problem::Problem;
///
/// let p = Problem::new(StatusCode::BAD_REQUEST, "invalid-header", "Invalid header")
///     .detail("quota-limit must be a non-negative integer")
///     .with("invalid_header", "quota-limit")
///     .with("value", "ten");
/// assert_eq!(p.status(), StatusCode::BAD_REQUEST);
/// assert_eq!(p.body()["invalid_header"], "quota-limit");
/// ```
#[derive(Debug, Clone)]
pub struct Problem(Box<Parts>);

/// The members of a [`Problem`], boxed so `Result<T, Problem>` stays small.
#[derive(Debug, Clone)]
struct Parts {
    status: StatusCode,
    slug: &'static str,
    title: &'static str,
    detail: Option<String>,
    extensions: Map<String, Value>,
    headers: HeaderMap,
}

impl Problem {
    /// A problem of type `https://tollgate.dev/problems/<slug>` with a fixed title.
    pub fn new(status: StatusCode, slug: &'static str, title: &'static str) -> Self {
        Self(Box::new(Parts {
            status,
            slug,
            title,
            detail: None,
            extensions: Map::new(),
            headers: HeaderMap::new(),
        }))
    }

    /// Sets the occurrence-specific explanation.
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.0.detail = Some(detail.into());
        self
    }

    /// Adds an extension member (e.g. `invalid_header`, `value`).
    pub fn with(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.0.extensions.insert(name.to_owned(), value.into());
        self
    }

    /// Adds a response header (e.g. `Retry-After`, `WWW-Authenticate`).
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.0.headers.insert(name, value);
        self
    }

    /// The HTTP status this problem is answered with.
    pub fn status(&self) -> StatusCode {
        self.0.status
    }

    /// The slug of the problem type (the last path segment of `type`).
    pub fn slug(&self) -> &'static str {
        self.0.slug
    }

    /// The JSON body: `type`, `title`, `status`, `detail` and the extension members.
    pub fn body(&self) -> Value {
        let p = &self.0;
        let mut body = Map::new();
        body.insert("type".into(), Value::String(format!("{TYPE_BASE}{}", p.slug)));
        body.insert("title".into(), Value::String(p.title.into()));
        body.insert("status".into(), Value::from(p.status.as_u16()));
        if let Some(detail) = &p.detail {
            body.insert("detail".into(), Value::String(detail.clone()));
        }
        for (k, v) in &p.extensions {
            body.insert(k.clone(), v.clone());
        }
        Value::Object(body)
    }

    /// 404 for a path the service does not serve.
    pub fn not_found(path: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not-found", "Not Found")
            .detail(format!("no resource at {path}"))
            .with("path", path)
    }

    /// 405 for a known path asked with the wrong method.
    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        Self::new(StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed", "Method Not Allowed")
            .detail(format!("{method} is not allowed on {path}"))
            .with("method", method)
            .with("path", path)
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.0.status.as_u16(), self.0.title)?;
        if let Some(d) = &self.0.detail {
            write!(f, ": {d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Problem {}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&self.body()).unwrap_or_default();
        let mut response = (self.0.status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        for (name, value) in self.0.headers {
            if let Some(name) = name {
                headers.insert(name, value);
            }
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_rfc9457_members_and_extensions() {
        let p = Problem::new(StatusCode::BAD_REQUEST, "invalid-header", "Invalid header")
            .detail("bad")
            .with("invalid_header", "quota-limit")
            .with("value", "x");
        let b = p.body();
        assert_eq!(b["type"], "https://tollgate.dev/problems/invalid-header");
        assert_eq!(b["title"], "Invalid header");
        assert_eq!(b["status"], 400);
        assert_eq!(b["detail"], "bad");
        assert_eq!(b["invalid_header"], "quota-limit");
        assert_eq!(b["value"], "x");
    }

    #[test]
    fn response_carries_status_content_type_and_headers() {
        let r = Problem::new(StatusCode::SERVICE_UNAVAILABLE, "store-unavailable", "Down")
            .header(axum::http::header::RETRY_AFTER, HeaderValue::from_static("1"))
            .into_response();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[CONTENT_TYPE], PROBLEM_JSON);
        assert_eq!(r.headers()[axum::http::header::RETRY_AFTER], "1");
    }
}
