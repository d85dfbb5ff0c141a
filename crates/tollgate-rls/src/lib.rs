//! Envoy's rate limit service (RLS v3) over gRPC, answered from Tollgate's quota counters.
//!
//! Envoy (and the gateways built on it: Istio, Envoy Gateway, Gloo, Emissary) asks
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` before it forwards a request.
//! This crate's one job is to map such a request to quota decisions: `[[rls.rule]]` turns a
//! domain and a descriptor's entries into a metering id ([`RuleSet`]), the one decision path of
//! `tollgate-policy` completes the spec with the policies and decides on the shared store
//! ([`RateLimiter`]), and the answer carries
//! per-descriptor statuses and the same `RateLimit`, `RateLimit-Policy` and `Retry-After`
//! values as `GET /v1/quota`. The standard gRPC health service runs beside it ([`serve()`]).
//!
//! The `.proto` definitions under `proto/` are written for this crate, wire-compatible with
//! Envoy's (same package, names, field numbers and types), and compiled by `build.rs` with
//! protox, so no `protoc` is needed. This crate depends on no HTTP crate of the workspace.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]
#![warn(unreachable_pub)]

mod answer;
mod calls;
mod codec;
mod conn;
mod deadline;
mod gate;
mod rules;
mod server;
mod service;

pub use conn::{Accepted, ConnLimits, Guarded, Slots};
pub use gate::{Gate, Open};
pub use rules::{RlsSection, RuleConfig, RuleError, RuleSet};
pub use server::{serve, serve_incoming};
pub use service::RateLimiter;

/// The messages, server and client generated from `proto/`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    /// `envoy.*` packages.
    pub mod envoy {
        /// `envoy.config.*`.
        pub mod config {
            /// `envoy.config.core.*`.
            pub mod core {
                /// `envoy.config.core.v3`: `HeaderValue`.
                pub mod v3 {
                    tonic::include_proto!("envoy.config.core.v3");
                }
            }
        }
        /// `envoy.extensions.*`.
        pub mod extensions {
            /// `envoy.extensions.common.*`.
            pub mod common {
                /// `envoy.extensions.common.ratelimit.*`.
                pub mod ratelimit {
                    /// `envoy.extensions.common.ratelimit.v3`: `RateLimitDescriptor`.
                    pub mod v3 {
                        tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                    }
                }
            }
        }
        /// `envoy.service.*`.
        pub mod service {
            /// `envoy.service.ratelimit.*`.
            pub mod ratelimit {
                /// `envoy.service.ratelimit.v3`: the service, its request and response.
                pub mod v3 {
                    tonic::include_proto!("envoy.service.ratelimit.v3");
                }
            }
        }
    }
}

pub use pb::envoy::service::ratelimit::v3 as rls;
