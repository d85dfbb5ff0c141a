//! `tollgate queue list` against the real server reads every page: the admin API answers 100
//! items at a time with a `Link: rel="next"` header, and the command follows it.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{BIN, Server, Status214, gateway_toml, wait_until};

#[test]
fn the_cli_lists_every_page_of_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let landing = dir.path().join("in");
    let text = format!(
        "[server]\ndata = \"{}\"\n{}",
        dir.path().join("data").display(),
        gateway_toml(&landing, &dir.path().join("out"), "", "")
    );
    let cfg = dir.path().join("tollgate.toml");
    std::fs::write(&cfg, text).unwrap();
    let server = Server::start(&["--config", cfg.to_str().unwrap()]);
    // 150 interchanges of a document without a route, in one file: 150 rejected items.
    let file: String = (0..150)
        .map(|i| String::from_utf8(Status214::new("CARRIERA", 10 + i).build()).unwrap())
        .map(|s| s.replace("ST*214*", "ST*810*") + "\n")
        .collect();
    std::fs::create_dir_all(&landing).unwrap();
    std::fs::write(landing.join("many.edi"), file).unwrap();
    let list = || {
        let o = Command::new(BIN)
            .args(["queue", "list", "--state", "rejected", "--json", "--url", &server.url])
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        serde_json::from_slice::<Vec<serde_json::Value>>(&o.stdout).unwrap()
    };
    wait_until("150 rejected items", Duration::from_secs(20), || list().len() >= 150);
    let rows = list();
    assert_eq!(rows.len(), 150);
    let first_page = server.get("/v1/queue?state=rejected");
    assert!(
        first_page
            .to_ascii_lowercase()
            .contains("\r\nlink: </v1/queue?state=rejected&limit=100&cursor="),
        "{}",
        &first_page[..first_page.len().min(600)]
    );
}
