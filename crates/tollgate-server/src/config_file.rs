//! Rewriting the config file from `PUT /v1/policies` without harming it.
//!
//! The file usually holds secrets (`admin_token`, `[[client]]` keys) and is often managed by
//! a deployment tool, so a rewrite must leave everything but the `[[policy]]` tables as the
//! operator wrote it:
//! - a symlinked path is resolved and its *target* is rewritten; the link stays a link;
//! - the new content goes to a temporary file of its own (a unique name, created exclusively)
//!   in the target's own directory (so the rename is atomic on one file system), which gets
//!   the old file's mode and owner *before* the rename, is fsynced, and then replaces the
//!   target, after which the directory is fsynced; readers see the old or the new file, never
//!   half of one, and never a moment where a 0600 file is world-readable. Writers within the
//!   process are serialized by [`crate::policy::Policies`]; a second process writing the same
//!   file still never shares a temporary file with this one;
//! - comments, order and formatting outside `[[policy]]` are kept (`toml_edit`), and so are
//!   those of each `[[policy]]` table whose `match` is still there: its comments and the
//!   comments beside its keys stay, only the values change. A new policy is written after the
//!   file's tables; a removed one goes with its comments;
//! - the file is read again just before the rename: if someone changed it since it was read
//!   (an operator's editor, a deployment tool), their version stays and the rewrite is
//!   refused. (A change landing between that read and the rename, a few microseconds, is
//!   still lost: no lock binds an editor.)

use std::path::{Path, PathBuf};

use tollgate_http::config::located;
use tollgate_policy::PolicyRule;

/// Why [`rewrite_policies`] wrote nothing.
#[derive(Debug)]
pub(crate) enum RewriteError {
    /// The caller's `vet` refused the file as found or as it would be written.
    Refused(String),
    /// Reading, encoding or writing failed; the message names the file.
    Failed(String),
}

/// Replaces the `[[policy]]` tables of `file` with `rules` (see the module docs), once
/// `vet(found, new)` accepts the file as found and as it would be written. Returns the
/// content written.
pub(crate) fn rewrite_policies(
    file: &Path,
    rules: &[PolicyRule],
    vet: impl FnOnce(&str, &str) -> Result<(), String>,
) -> Result<String, RewriteError> {
    let target = resolve(file).map_err(RewriteError::Failed)?;
    let shown = target.display();
    let (source, meta) = match std::fs::read_to_string(&target) {
        Ok(s) => {
            let meta = std::fs::metadata(&target).map_err(|e| {
                RewriteError::Failed(format!("{shown}: cannot read its permissions: {e}"))
            })?;
            (s, Some(meta))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), None),
        Err(e) => return Err(RewriteError::Failed(format!("{shown}: cannot read: {e}"))),
    };
    let text = with_policies(&target, &source, rules).map_err(RewriteError::Failed)?;
    vet(&source, &text).map_err(RewriteError::Refused)?;
    // Read again just before the rename: an edit made by hand (or by a deployment tool) since
    // the first read is kept, and this rewrite refused, rather than the edit lost.
    let unchanged = || match std::fs::read_to_string(&target) {
        Ok(now) => now == source,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => meta.is_none(),
        Err(_) => false,
    };
    match write_atomically(&target, text.as_bytes(), meta.as_ref(), unchanged) {
        Ok(true) => Ok(text),
        Ok(false) => Err(RewriteError::Refused(format!(
            "{shown} changed while the policies were being written; nothing was written, and \
             the file is as it was changed: send the change again"
        ))),
        Err(e) => Err(RewriteError::Failed(format!("{shown}: cannot write: {e}"))),
    }
}

/// `source` with its `[[policy]]` tables replaced by `rules`, everything else untouched.
fn with_policies(file: &Path, source: &str, rules: &[PolicyRule]) -> Result<String, String> {
    // Validate with the strict parser first, so an error carries FILE:LINE:COL.
    toml::from_str::<toml::Table>(source).map_err(|e| located(file, source, &e))?;
    let mut doc: toml_edit::DocumentMut =
        source.parse().map_err(|e| format!("{}: {e}", file.display()))?;
    let old = doc.remove("policy");
    let mut old: Vec<toml_edit::Table> = old
        .and_then(|item| item.into_array_of_tables().ok())
        .map(|tables| tables.into_iter().collect())
        .unwrap_or_default();
    if !rules.is_empty() {
        let mut wrapper = toml::Table::new();
        let value =
            toml::Value::try_from(rules).map_err(|e| format!("cannot encode policies: {e}"))?;
        wrapper.insert("policy".into(), value);
        let encoded =
            toml::to_string(&wrapper).map_err(|e| format!("cannot encode policies: {e}"))?;
        let fresh: toml_edit::DocumentMut =
            encoded.parse().map_err(|e| format!("cannot encode policies: {e}"))?;
        let mut tables = toml_edit::ArrayOfTables::new();
        for table in fresh.get("policy").and_then(|i| i.as_array_of_tables()).into_iter().flatten()
        {
            tables.push(kept_or_new(&mut old, table));
        }
        doc.insert("policy", toml_edit::Item::ArrayOfTables(tables));
    }
    let mut text = doc.to_string();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

/// The file's own table for the policy `fresh` (the first one left with the same `match`),
/// with `fresh`'s values put in place of its own and its comments and layout kept; or
/// `fresh` itself, written after the file's tables, when the file has none.
fn kept_or_new(old: &mut Vec<toml_edit::Table>, fresh: &toml_edit::Table) -> toml_edit::Table {
    let pattern = |t: &toml_edit::Table| t.get("match").and_then(|m| m.as_str()).map(str::to_owned);
    let Some(at) = old.iter().position(|t| pattern(t).is_some() && pattern(t) == pattern(fresh))
    else {
        let mut table = fresh.clone();
        // Positions from the fresh document would interleave with the file's own tables;
        // without one, the table is written after them.
        table.set_position(None);
        return table;
    };
    let mut table = old.remove(at);
    let gone: Vec<String> =
        table.iter().map(|(k, _)| k.to_owned()).filter(|k| !fresh.contains_key(k)).collect();
    for key in gone {
        table.remove(&key);
    }
    for (key, item) in fresh.iter() {
        let Some(value) = item.as_value() else { continue };
        match table.get_mut(key).and_then(|i| i.as_value_mut()) {
            Some(current) => {
                let decor = current.decor().clone();
                *current = value.clone();
                *current.decor_mut() = decor;
            }
            None => {
                table.insert(key, toml_edit::Item::Value(value.clone()));
            }
        }
    }
    table
}

/// The file a (possibly symlinked) config path really names. A missing file resolves to
/// itself (it will be created).
fn resolve(file: &Path) -> Result<PathBuf, String> {
    match std::fs::canonicalize(file) {
        Ok(p) => Ok(p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A dangling link must not be replaced by a plain file.
            if std::fs::symlink_metadata(file).is_ok() {
                return Err(format!("{}: is a symlink to a missing file", file.display()));
            }
            Ok(file.to_owned())
        }
        Err(e) => Err(format!("{}: cannot resolve: {e}", file.display())),
    }
}

/// Writes `bytes` to `target` through a temporary sibling carrying `meta`'s mode and owner;
/// writes nothing and answers false when `unchanged`, asked just before the rename, says the
/// target is no longer what was read.
fn write_atomically(
    target: &Path,
    bytes: &[u8],
    meta: Option<&std::fs::Metadata>,
    unchanged: impl FnOnce() -> bool,
) -> std::io::Result<bool> {
    use std::io::Write;
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let (tmp, mut f) = unique_temp(&dir, &name)?;
    let result = (|| {
        if let Some(meta) = meta {
            keep_owner_and_mode(&f, meta)?;
        }
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        if !unchanged() {
            return Ok(false);
        }
        std::fs::rename(&tmp, target)?;
        // The rename itself is durable only once the directory is.
        std::fs::File::open(&dir)?.sync_all()?;
        Ok(true)
    })();
    if !matches!(result, Ok(true)) {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A new temporary file beside `name` in `dir`, created exclusively (never one another writer
/// has open) and private (0600) from birth: `.NAME.PID.N.tollgate-tmp`.
fn unique_temp(dir: &Path, name: &str) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".{name}.{pid}.{n}.tollgate-tmp"));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            // Born private: the secrets are never readable by others, even for a moment.
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        match options.open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            // Left by an earlier process with the same pid: take the next name.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Gives `f` the owner (when allowed: only root may give a file away) and mode of `meta`.
#[cfg(unix)]
fn keep_owner_and_mode(f: &std::fs::File, meta: &std::fs::Metadata) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    if let Err(e) = std::os::unix::fs::fchown(f, Some(meta.uid()), Some(meta.gid())) {
        // An unprivileged server can only keep its own uid; a different owner it cannot
        // restore is an error rather than a silent change of who may read the secrets.
        let current = f.metadata()?;
        if current.uid() != meta.uid() || current.gid() != meta.gid() {
            return Err(std::io::Error::new(
                e.kind(),
                format!("cannot keep the owner {}:{}: {e}", meta.uid(), meta.gid()),
            ));
        }
    }
    f.set_permissions(meta.permissions())
}

#[cfg(not(unix))]
fn keep_owner_and_mode(f: &std::fs::File, meta: &std::fs::Metadata) -> std::io::Result<()> {
    f.set_permissions(meta.permissions())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand edit made while a rewrite is under way (here: while it is vetted) is kept, and
    /// the rewrite refused; before, the rewrite renamed its copy over the edit.
    #[test]
    fn a_hand_edit_made_during_a_rewrite_is_kept_and_the_rewrite_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t.toml");
        std::fs::write(&file, "[[policy]]\nmatch = \"R:*\"\nlimit = 1\nunit = \"day\"\n").unwrap();
        let edited = "# by hand\n[[policy]]\nmatch = \"R:*\"\nlimit = 2\nunit = \"day\"\n";
        let rewritten = rewrite_policies(&file, &[], |_, _| {
            std::fs::write(&file, edited).map_err(|e| e.to_string())
        });
        match rewritten {
            Err(RewriteError::Refused(m)) => assert!(m.contains("changed while"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(std::fs::read_to_string(&file).unwrap(), edited);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file left");
        // Nobody else writing: the rewrite goes through.
        let written = rewrite_policies(&file, &[], |_, _| Ok(())).unwrap();
        assert!(!written.contains("[[policy]]"), "{written}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), written);
    }
}
