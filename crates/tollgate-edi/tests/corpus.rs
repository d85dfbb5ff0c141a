//! External corpora, named by `TOLLGATE_EXTRA_CORPUS=DIR[:DIR...]` (separated like `PATH`):
//! every file below each `DIR` (EDI written by other projects) is read without panic and passes
//! the self-checks. The project's own fixtures cover each layout (tests/fixtures.rs); this run
//! adds other people's files. Without the variable the test says it was skipped and why; CI
//! always sets it. A named directory that is missing or holds no EDI file fails the test.

use std::path::{Path, PathBuf};

const VAR: &str = "TOLLGATE_EXTRA_CORPUS";

fn files_below(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap_or_else(|e| panic!("{}: {e}", dir.display())).path();
        if path.is_dir() {
            files_below(&path, out);
        } else if path.extension().is_some_and(|e| e == "edi" || e == "txt" || e == "x12") {
            out.push(path);
        }
    }
}

#[test]
fn every_file_of_the_extra_corpus_is_read_and_passes_the_self_checks() {
    let Some(dirs) = std::env::var_os(VAR) else {
        eprintln!(
            "SKIPPED: {VAR} is not set, so no external corpus was read \
             (set {VAR}=DIR[:DIR...] to run every EDI file below each DIR through the parser's \
             self-checks)"
        );
        return;
    };
    // A relative DIR is taken from the workspace root, where the README's commands run.
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let dirs: Vec<PathBuf> = std::env::split_paths(&dirs).collect();
    // An empty entry would mean the workspace root itself: refused, as a likely typo.
    assert!(
        dirs.iter().all(|d| !d.as_os_str().is_empty()),
        "{VAR}={:?} has an empty entry; name each directory",
        std::env::var_os(VAR).unwrap_or_default()
    );
    let dirs: Vec<PathBuf> = dirs.iter().map(|d| root.join(d)).collect();
    for dir in &dirs {
        let mut files = Vec::new();
        files_below(dir, &mut files);
        assert!(!files.is_empty(), "{VAR}: {} holds no .edi, .x12 or .txt file", dir.display());
        for path in &files {
            tollgate_edi::self_check_file(path);
        }
        eprintln!("{VAR}: {} files below {} read and self-checked", files.len(), dir.display());
    }
}
