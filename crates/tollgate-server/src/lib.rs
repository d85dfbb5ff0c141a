//! tollgate-server
#![forbid(unsafe_code)]
