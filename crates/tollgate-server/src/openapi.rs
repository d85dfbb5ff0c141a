//! The OpenAPI 3.1 description of the service's own routes, generated from the
//! `#[utoipa::path]` annotations beside the handlers; the binary merges the gateway's and its
//! own into the one document served at `GET /openapi.json`.
//!
//! What every operation shares is added here, once: the security schemes the server accepts
//! (the admin token or a user's token as `Authorization: Bearer`, a `[[client]]` key as
//! `x-api-key`) and the answers the listener gives before any handler runs (414, 431, and for
//! operations with a body 408 and 413), all RFC 9457 problems.

use utoipa::openapi::path::Operation;
use utoipa::openapi::schema::{Schema, SchemaType, Type};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi as Document, RefOr, Responses};
use utoipa::{Modify, OpenApi};

use tollgate_http::openapi::{ADMIN_TOKEN, API_KEY, ProblemDoc, problem_response};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Tollgate",
        description = "Traffic control for EDI / B2B pipelines: quota checks, the admin API, \
                       the EDI gateway's uploads and hold queue, health and metrics. Every error \
                       is an RFC 9457 problem (application/problem+json)."
    ),
    paths(
        crate::quota::check,
        crate::refund::refund,
        crate::admin::counters::list_counters,
        crate::admin::counters::reset_counter,
        crate::admin::policies::get_policies,
        crate::admin::policies::put_policies,
        crate::audit::list,
        crate::usage::http::get,
        crate::health::healthz,
        crate::health::readyz,
        crate::metrics::render,
    ),
    components(schemas(ProblemDoc)),
    modifiers(&Shared),
    tags(
        (name = "quota", description = "The quota check"),
        (name = "admin", description = "Counters, policies and the audit log"),
        (name = "operations", description = "Health and metrics"),
    )
)]
struct ServerApi;

/// The description of the server's routes, with the shared schemes and listener answers.
/// Merge other routers' descriptions with [`finish`] so they get those too.
pub fn document() -> Document {
    ServerApi::openapi()
}

/// Adds the security schemes and the listener's answers to every operation of `doc` (call it
/// once, after merging).
pub fn finish(mut doc: Document) -> Document {
    Shared.modify(&mut doc);
    doc
}

/// The parts every operation shares (see the module docs).
struct Shared;

impl Modify for Shared {
    fn modify(&self, doc: &mut Document) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            ADMIN_TOKEN,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The admin token ([server] admin_token) or a [[user]]'s token. Without \
                         any configured, the admin API is open on a loopback listener only.",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            API_KEY,
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                tollgate_http::client::API_KEY_HEADER,
                "A [[client]] key; required on /v1/quota once any [[client]] is configured.",
            ))),
        );
        if !components.schemas.contains_key("Problem") {
            components
                .schemas
                .insert("Problem".into(), <ProblemDoc as utoipa::PartialSchema>::schema());
        }
        for item in doc.paths.paths.values_mut() {
            let ops = [
                (&mut item.get, false),
                (&mut item.put, true),
                (&mut item.post, true),
                (&mut item.delete, false),
            ];
            for (op, body) in ops {
                if let Some(op) = op.as_mut() {
                    not_null(op);
                    listener_answers(op, body);
                }
            }
        }
    }
}

/// Header and query parameters are absent or a value, never `null`: an optional parameter's
/// schema loses the `null` that its `Option` type adds.
fn not_null(op: &mut Operation) {
    for p in op.parameters.iter_mut().flatten() {
        let RefOr::T(p) = p else { continue };
        if let Some(RefOr::T(Schema::Object(o))) = p.schema.as_mut()
            && let SchemaType::Array(types) = &o.schema_type
        {
            let kept: Vec<Type> = types.iter().filter(|t| **t != Type::Null).cloned().collect();
            if let [only] = kept.as_slice() {
                o.schema_type = SchemaType::Type(only.clone());
            }
        }
    }
}

fn listener_answers(op: &mut Operation, body: bool) {
    let add = |responses: &mut Responses, code: &str, text: &str| {
        responses
            .responses
            .entry(code.to_owned())
            .or_insert_with(|| RefOr::T(problem_response(text)));
    };
    let r = &mut op.responses;
    add(r, "414", "The request target is longer than 8 KiB (problem uri-too-long).");
    add(r, "431", "The header fields exceed 8 KiB (problem headers-too-large).");
    if body {
        add(
            r,
            "408",
            "The body stalled for body_timeout_ms (problem body-timeout), or arrived slower than body_min_rate_bytes on average after it (problem body-too-slow).",
        );
        add(r, "413", "The body is larger than this route reads (problem body-too-large).");
    }
}
