//! The OpenAPI pieces every face's description shares: the problem schema ([`ProblemDoc`]),
//! the answers to a refused caller ([`AccessRefused`]), the security scheme names, and
//! [`problem_response`] for answers built by hand. The quota service assembles the document.

use utoipa::ToSchema;
use utoipa::openapi::{ContentBuilder, Ref, Response, ResponseBuilder};

use crate::problem::PROBLEM_JSON;

/// The security scheme name of the admin token and users' tokens.
pub const ADMIN_TOKEN: &str = "admin_token";
/// The security scheme name of `[[client]]` keys.
pub const API_KEY: &str = "api_key";

/// An RFC 9457 problem (`application/problem+json`); extension members such as
/// `invalid_header` and `value` name what was wrong.
#[derive(ToSchema)]
#[schema(as = Problem)]
#[allow(dead_code)]
pub struct ProblemDoc {
    /// `https://tollgate.dev/problems/<slug>`: stable, for clients to switch on.
    #[schema(rename = "type", format = "uri")]
    kind: String,
    /// A fixed summary of the type.
    title: String,
    /// The response's status code.
    #[schema(minimum = 400, maximum = 599)]
    status: u16,
    /// What went wrong this time.
    #[schema(required = false)]
    detail: String,
}

/// The answers of every route behind [`crate::AccessGuard`] to a caller it refuses:
/// name it in `responses(...)` beside the route's own answers.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum AccessRefused {
    /// 401: no valid credentials.
    #[response(
        status = 401,
        description = "Credentials are configured and none valid was sent: no bearer token or a wrong one, or an expired or logged-out session cookie (problem admin-unauthorized).",
        content_type = "application/problem+json",
        headers(("WWW-Authenticate" = String, description = "`Bearer realm=\"tollgate\"`"))
    )]
    Unauthorized(ProblemDoc),
    /// 403: credentials that do not cover the route, or none configured off loopback.
    #[response(
        status = 403,
        description = "The user's role does not allow this (problem role-forbidden), a session cookie came without its CSRF token (problem csrf-token-required), or no credentials are configured and the listener is not loopback (problem admin-token-required).",
        content_type = "application/problem+json"
    )]
    Forbidden(ProblemDoc),
}

/// A problem answer, for `responses` built by hand.
pub fn problem_response(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            PROBLEM_JSON,
            ContentBuilder::new().schema(Some(Ref::from_schema_name("Problem"))).build(),
        )
        .build()
}
