//! tollgate-gateway
#![forbid(unsafe_code)]
