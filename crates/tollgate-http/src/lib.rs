//! What every HTTP face of Tollgate shares: the quota service, the EDI gateway's uploads and
//! queue, and the console.
//!
//! - answers: every error is an RFC 9457 [`problem`], described once for OpenAPI
//!   ([`openapi`]);
//! - who may do what: the [`access`] guard over bearer tokens, `[[user]]` roles ([`user`]),
//!   console [`session`]s and `[[client]]` keys ([`client`]), with failed credentials limited
//!   per address ([`failed_logins`], behind trusted proxies: [`proxy`]) and peer certificates
//!   under mTLS ([`tls`]);
//! - what was changed by whom: the [`audit`] log;
//! - the config readers every section uses ([`config`]) and the file watcher behind live
//!   reloads ([`file_watch`]).
//!
//! Nothing here knows the quota engine's store or the gateway: those depend on this crate,
//! never the other way.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]
#![warn(unreachable_pub)]

pub mod access;
pub mod audit;
pub mod client;
pub mod config;
pub mod failed_logins;
pub mod file_watch;
pub mod openapi;
pub mod pace;
pub mod problem;
pub mod proxy;
pub mod session;
pub mod tls;
pub mod user;

pub use access::AccessGuard;
pub use problem::Problem;
