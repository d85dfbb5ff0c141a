//! `PUT /v1/policies` rewrites the real config file without harming it: the mode (a 0600 file
//! holds secrets) and the owner are kept, a symlinked config keeps its link and has its
//! target rewritten, and comments outside `[[policy]]` survive. Also: the admin API's
//! `Bearer` scheme is case-insensitive.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use common::{Options, Server};
use tollgate_server::Policies;

const FILE: &str = "# Tollgate for the ACME pipeline\n[server]\n# the secret lives here\nadmin_token = \"s3cret-token\"\n\n[[policy]]\nmatch = \"R:*\"\nlimit = 10\nunit = \"day\"\n";

const NEW: &str = r#"{"policies":[{"match":"R:*","limit":77,"unit":"day"}]}"#;

async fn put(s: &Server, token: &str) -> reqwest::Response {
    let send = s
        .http
        .put(s.url("/v1/policies"))
        .header("authorization", format!("Bearer {token}"))
        .body(NEW)
        .send();
    tokio::time::timeout(Duration::from_secs(10), send).await.expect("PUT hung").unwrap()
}

async fn serve(file: &Path) -> Server {
    let policies = Policies::from_file(file).unwrap();
    Server::with(Options { policies, token: Some("s3cret-token"), ..Options::default() }).await
}

#[tokio::test]
async fn put_keeps_a_private_file_private_and_keeps_comments() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tollgate.toml");
    std::fs::write(&file, FILE).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let before = std::fs::metadata(&file).unwrap();
    let s = serve(&file).await;
    assert_eq!(put(&s, "s3cret-token").await.status(), 200);
    let after = std::fs::metadata(&file).unwrap();
    assert_eq!(after.permissions().mode() & 0o7777, 0o600, "the mode changed");
    assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()), "the owner changed");
    assert_ne!(after.ino(), before.ino(), "the file was not replaced atomically");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("limit = 77"), "{text}");
    assert!(text.contains("# Tollgate for the ACME pipeline"), "comment lost: {text}");
    assert!(text.contains("# the secret lives here"), "comment lost: {text}");
    assert!(text.contains("admin_token = \"s3cret-token\""), "{text}");
    // No temporary file is left behind.
    let names: Vec<_> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 1, "{names:?}");
    s.stop().await;
}

#[tokio::test]
async fn put_keeps_a_group_readable_mode() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tollgate.toml");
    std::fs::write(&file, FILE).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let s = serve(&file).await;
    assert_eq!(put(&s, "s3cret-token").await.status(), 200);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o640);
    s.stop().await;
}

#[tokio::test]
async fn put_writes_through_a_symlink_and_keeps_the_link() {
    let dir = tempfile::tempdir().unwrap();
    let real_dir = dir.path().join("releases/v42");
    std::fs::create_dir_all(&real_dir).unwrap();
    let target = real_dir.join("tollgate.toml");
    std::fs::write(&target, FILE).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link = dir.path().join("tollgate.toml");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let s = serve(&link).await;
    assert_eq!(put(&s, "s3cret-token").await.status(), 200);
    let meta = std::fs::symlink_metadata(&link).unwrap();
    assert!(meta.file_type().is_symlink(), "the symlink was replaced by a plain file");
    assert_eq!(std::fs::read_link(&link).unwrap(), target);
    let text = std::fs::read_to_string(&target).unwrap();
    assert!(text.contains("limit = 77"), "the target was not rewritten: {text}");
    let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o600);
    // The temporary file lived beside the target, and is gone.
    assert_eq!(std::fs::read_dir(&real_dir).unwrap().count(), 1);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "releases/ and the link");
    s.stop().await;
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tollgate.toml");
    std::fs::write(&file, FILE).unwrap();
    let s = serve(&file).await;
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let r = s
            .http
            .get(s.url("/v1/policies"))
            .header("authorization", format!("{scheme} s3cret-token"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{scheme}");
    }
    for bad in ["Basic s3cret-token", "Bearer S3CRET-TOKEN", "Bearers3cret-token", "s3cret-token"] {
        let r =
            s.http.get(s.url("/v1/policies")).header("authorization", bad).send().await.unwrap();
        assert_eq!(r.status(), 401, "{bad}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
    }
    s.stop().await;
}

#[tokio::test]
async fn put_keeps_the_comments_of_the_policies_it_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tollgate.toml");
    let text = "[server]\nadmin_token = \"s3cret-token\"\n\n\
        # Carriers: agreed with logistics in March\n[[policy]]\nmatch = \"R:*\"\n\
        # raise only after a ticket\nlimit = 10 # per day\nunit = \"day\"\n\n\
        # Old invoices rule\n[[policy]]\nmatch = \"I:*\"\nlimit = 5\nunit = \"hour\"\n";
    std::fs::write(&file, text).unwrap();
    let s = serve(&file).await;
    let body = r#"{"policies":[{"match":"R:*","limit":77,"unit":"day","mode":"shadow"},
        {"match":"N:*","limit":3,"unit":"minute"}]}"#;
    let r = s
        .http
        .put(s.url("/v1/policies"))
        .header("authorization", "Bearer s3cret-token")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let after = std::fs::read_to_string(&file).unwrap();
    for kept in ["# Carriers: agreed with logistics in March", "# raise only after a ticket"] {
        assert!(after.contains(kept), "comment lost: {after}");
    }
    assert!(after.contains("limit = 77 # per day"), "{after}");
    assert!(after.contains("mode = \"shadow\""), "{after}");
    assert!(!after.contains("I:*") && !after.contains("Old invoices"), "removed: {after}");
    assert!(after.find("R:*") < after.find("N:*"), "a new policy goes after: {after}");
    let reread = Policies::from_file(&file).unwrap();
    assert_eq!(reread.current().rules().len(), 2, "{after}");
    s.stop().await;
}
