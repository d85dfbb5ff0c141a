//! Limit advice from a traffic history.

use std::path::Path;

/// Makes a progress callback for a run offering `total` interchanges.
pub type Progress<'a> = &'a dyn Fn(u64) -> Box<dyn Fn(u64) + Sync>;

/// `tollgate advise`: the proposal as TOML.
pub fn command(
    _history: Option<&Path>,
    _data_dir: Option<&Path>,
    _target_held: &str,
    _headroom: f64,
    _out: &Path,
    _progress: Progress<'_>,
) -> Result<String, String> {
    Err("not yet".into())
}
