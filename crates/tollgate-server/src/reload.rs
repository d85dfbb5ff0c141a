//! Whole-file checks for the hot reload of the config file.
//!
//! The server only applies `[[policy]]` live, but the file it re-reads also holds sections it
//! does not own (the binary's `[gateway]`, …). A reload that looked at `[[policy]]` alone
//! would accept a typo elsewhere, report ready, and leave a file the next start-up refuses.
//! So the owner of the whole file (the binary) hands [`crate::policy::Policies`] a
//! [`FileValidator`]: the same validation as start-up, plus the list of changes that only a
//! restart applies. A file that fails it is refused as a whole.

use std::path::Path;
use std::sync::Arc;

use tollgate_policy::PolicySet;

/// What a valid config file yields for a live reload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileCheck {
    /// The `[[policy]]` tables, applied live.
    pub policies: PolicySet,
    /// Changes against the running process that need a restart, e.g.
    /// `"server.listen changed: restart to apply"`.
    pub restart_needed: Vec<String>,
}

/// Validates a whole config file (`path` labels errors; `source` is its content). Errors read
/// `FILE[:LINE:COL]: message`, like start-up's.
pub type FileValidator = Arc<dyn Fn(&Path, &str) -> Result<FileCheck, String> + Send + Sync>;
