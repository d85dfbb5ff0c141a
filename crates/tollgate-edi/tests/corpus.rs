//! An external corpus, named by `TOLLGATE_EXTRA_CORPUS=DIR`: every file below `DIR` (EDI
//! written by other projects) is read without panic and passes the self-checks. The project's
//! own fixtures cover each layout (tests/fixtures.rs); this run adds other people's files.
//! Without the variable the test says it was skipped and why; CI always sets it.

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
    let Some(dir) = std::env::var_os(VAR) else {
        eprintln!(
            "SKIPPED: {VAR} is not set, so no external corpus was read \
             (set {VAR}=DIR to run every EDI file below DIR through the parser's self-checks)"
        );
        return;
    };
    // A relative DIR is taken from the workspace root, where the README's commands run.
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(dir);
    let mut files = Vec::new();
    files_below(&dir, &mut files);
    assert!(!files.is_empty(), "{VAR}={} holds no .edi, .x12 or .txt file", dir.display());
    for path in &files {
        tollgate_edi::selfcheck::check_file(path);
    }
    eprintln!("{VAR}: {} files read and self-checked", files.len());
}
