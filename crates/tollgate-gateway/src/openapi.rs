//! The OpenAPI description of the gateway's routes (uploads and the queue API), generated from
//! the annotations beside their handlers; the binary merges it into `GET /openapi.json`.

use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    paths(
        crate::upload::upload,
        crate::queue::list,
        crate::queue::retry,
        crate::queue::release,
        crate::queue::purge,
        crate::queue::payload,
        crate::bulk::purge,
        crate::bulk::release,
        crate::bulk::show,
        crate::bulk::stop,
        crate::bulk::list,
    ),
    tags((name = "gateway", description = "The EDI gateway: uploads and the hold queue")),
)]
struct GatewayApi;

/// The description of [`crate::Gateway::router`]'s routes.
pub(crate) fn document() -> utoipa::openapi::OpenApi {
    GatewayApi::openapi()
}
