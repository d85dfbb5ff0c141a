//! tollgate-edi
#![forbid(unsafe_code)]
