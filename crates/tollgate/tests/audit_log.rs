//! The audit log through the real `tollgate serve`: every acknowledged change has its record,
//! even when the client hangs up right after sending it (the pipeline kept busy by a slow
//! remote quota service), when the log ends in a torn line (written while the server runs, or
//! left for the next start), and after a `limits` user's 70 large policy edits (36 MB of
//! before and after, more than the 32 MiB the log used to keep), which no longer push an
//! earlier counter reset out of the log. A change whose record meets a full disk is answered
//! 500 `audit-write-failed` instead of 200, and leaves no torn line. A policy set taken from an
//! edit of the config file is recorded too.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{Server, SlowQuota, Status214, gateway_toml, jitter, sha256_hex, wait_until};
use serde_json::{Value, json};

fn audit(server: &Server, token: Option<&str>) -> Vec<Value> {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> =
        auth.as_deref().map(|a| ("authorization", a)).into_iter().collect();
    let reply = server.call("GET", "/v1/audit?limit=1000", &headers, "");
    assert_eq!(reply.status, 200, "{reply:?}");
    reply.json().as_array().unwrap().clone()
}

/// (action, target) of each record, oldest first.
fn actions(records: &[Value]) -> Vec<(String, String)> {
    records
        .iter()
        .rev()
        .map(|r| {
            (r["action"].as_str().unwrap().to_owned(), r["target"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// Appends a torn copy of the log's last record (a random prefix, no newline), as a crash or a
/// full disk mid-write leaves it.
fn tear(log: &Path, salt: u64) {
    use std::io::Write;
    let text = std::fs::read_to_string(log).unwrap();
    let last = text.lines().last().unwrap();
    let cut = 1 + (jitter(salt) as usize) % (last.len() - 1);
    let mut f = std::fs::OpenOptions::new().append(true).open(log).unwrap();
    f.write_all(&last.as_bytes()[..cut]).unwrap();
}

#[test]
fn a_torn_last_line_never_swallows_the_next_record() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let args = ["--store", "memory", "--data", data.to_str().unwrap()];
    let mut server = Server::start(&args);
    let mut want = Vec::new();
    for round in 0..20u64 {
        let reset = |server: &Server, id: &str| {
            let reply = server.call("DELETE", &format!("/v1/counters/{id}"), &[], "");
            assert_eq!(reply.status, 200, "round {round}: {reply:?}");
        };
        let a = format!("Torn:A{round}");
        reset(&server, &a);
        want.push(("counter.reset".to_owned(), a));
        tear(&data.join("audit.jsonl"), round);
        // Odd rounds: the torn line is found at the next start; even rounds: before the next
        // append of the running server.
        if round % 2 == 1 {
            server.sigkill();
            server = Server::start(&args);
        }
        let b = format!("Torn:B{round}");
        reset(&server, &b);
        want.push(("counter.reset".to_owned(), b));
        assert_eq!(actions(&audit(&server, None)), want, "round {round}");
    }
}

#[test]
fn seventy_large_policy_edits_do_not_push_an_earlier_reset_out() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tollgate.toml");
    let text = format!(
        "[server]\nadmin_token = \"root-token\"\ndata = \"{}\"\n\n\
         [[user]]\nname = \"lena\"\ntoken_sha256 = \"{}\"\nrole = \"limits\"\n",
        dir.path().join("data").display(),
        sha256_hex("lena-token"),
    );
    std::fs::write(&cfg, text).unwrap();
    let server = Server::start(&["--config", cfg.to_str().unwrap()]);
    let root = [("authorization", "Bearer root-token")];
    let reply = server.call("DELETE", "/v1/counters/Carrier:kept", &root, "");
    assert_eq!(reply.status, 200, "{reply:?}");

    // Each edit changes every limit of 750 rules with long globs: about 0.5 MB of before and
    // after (fewer, longer rules than the 0.9 MB edits: each glob compiles slowly in a
    // debug build; the volume written is the same).
    let lena = [("authorization", "Bearer lena-token")];
    let pad = "x".repeat(270);
    for n in 0..70u64 {
        let rules: Vec<Value> = (0..750u64)
            .map(|i| json!({"match": format!("L{i:05}-{pad}:*"), "limit": n * 10 + 1}))
            .collect();
        let body = json!({ "policies": rules }).to_string();
        let reply = server.call("PUT", "/v1/policies", &lena, &body);
        assert_eq!(reply.status, 200, "edit {n}: {} {}", reply.status, reply.text());
    }
    let records = audit(&server, Some("root-token"));
    let seen = actions(&records);
    assert_eq!(seen.len(), 71, "{seen:?}");
    assert_eq!(seen[0], ("counter.reset".to_owned(), "Carrier:kept".to_owned()));
    assert!(seen[1..].iter().all(|(a, _)| a == "policies.replace"));
    // Each large record says what changed, bounded, and how much it left out.
    let last = &records[0];
    assert_eq!(last["who"], "lena");
    assert_eq!(last["after"]["omitted"], true, "{}", last["after"]);
    assert_eq!(last["diff"]["added"][0]["limit"], 691, "{}", last["diff"]);
    assert_eq!(last["diff"]["removed"][0]["limit"], 681, "{}", last["diff"]);
    assert!(last["diff"]["left_out"]["entries"].as_u64().unwrap() > 0);
    let on_disk: u64 = std::fs::read_dir(dir.path().join("data"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("audit"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(on_disk < 3 << 20, "71 records take {on_disk} bytes");
}

/// The ids of the gateway's queue items (every state).
fn queue_ids(server: &Server) -> Vec<String> {
    let reply = server.call("GET", "/v1/queue?limit=1000", &[], "");
    assert_eq!(reply.status, 200, "{reply:?}");
    reply.json().as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap().to_owned()).collect()
}

fn held(server: &Server) -> Vec<String> {
    let reply = server.call("GET", "/v1/queue?state=held&limit=1000", &[], "");
    reply.json().as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn a_purge_whose_client_hangs_up_is_still_recorded() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let quota = SlowQuota::start(Duration::from_millis(100));
    let landing = dir.path().join("in");
    std::fs::create_dir_all(&landing).unwrap();
    let remote =
        format!("[gateway.quota]\nmode = \"remote\"\nurl = \"{}\"\ntimeout_ms = 5000\n", quota.url);
    let rest = format!("[server]\ndata = \"{}\"\n", dir.path().join("data").display());
    let cfg = dir.path().join("tollgate.toml");
    std::fs::write(&cfg, gateway_toml(&landing, &dir.path().join("out"), &remote, &rest)).unwrap();
    let server = Server::start(&["--config", cfg.to_str().unwrap()]);
    let drop_file = |n: u32| {
        let tmp = landing.join(format!("{n}.part"));
        // A sender of its own: a held sender's later items are held without a check.
        std::fs::write(&tmp, Status214::new(&format!("CARR{n:04}"), n).build()).unwrap();
        std::fs::rename(&tmp, landing.join(format!("{n}.edi"))).unwrap();
    };
    drop_file(1);
    wait_until("the first item held", Duration::from_secs(20), || held(&server).len() == 1);

    let mut purged = 0;
    for round in 0..20u32 {
        let target = held(&server)[0].clone();
        // The pipeline starts checking a new file with the slow quota service...
        quota.set_delay(Duration::from_millis(300 + jitter(u64::from(round)) % 400));
        let hits = quota.hits();
        drop_file(round + 2);
        wait_until("the pipeline busy", Duration::from_secs(20), || quota.hits() > hits);
        // ...while an operator purges a held item and closes the connection before the answer
        // (the purge waits for the pipeline meanwhile).
        {
            let mut c = std::net::TcpStream::connect(&server.addr).unwrap();
            write!(
                c,
                "DELETE /v1/queue/{target} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 0\r\n\r\n"
            )
            .unwrap();
            std::thread::sleep(Duration::from_millis(20 + jitter(u64::from(round) + 99) % 150));
        }
        // Queue actions are applied in order: once this one is answered, the purge was
        // applied, if it was sent at all.
        let probe = server.call("POST", "/v1/queue/no-such-item/retry", &[], "");
        assert_eq!(probe.status, 404, "{probe:?}");
        let record = ("queue.purge".to_owned(), target.clone());
        if queue_ids(&server).contains(&target) {
            // Closed before the handler ran: nothing done, so nothing to record.
            assert!(!actions(&audit(&server, None)).contains(&record), "round {round}");
        } else {
            purged += 1;
            wait_until("the purge's audit record", Duration::from_secs(10), || {
                actions(&audit(&server, None)).contains(&record)
            });
        }
        wait_until("the new file held", Duration::from_secs(20), || {
            held(&server).len() == 2 + round as usize - purged
        });
    }
    assert!(purged >= 15, "the hang-up came after the purge was sent in {purged} of 20 rounds");
}

#[test]
fn a_change_whose_record_meets_a_full_disk_is_not_acknowledged_as_recorded() {
    let Some(disk) = tollgate_testkit::SmallDisk::mount("4m") else { return };
    let dir = tempfile::tempdir().unwrap();
    let data = disk.path().join("data");
    // The config file lives elsewhere: only the audit log meets the full disk.
    let cfg = dir.path().join("tollgate.toml");
    std::fs::write(&cfg, format!("[server]\ndata = \"{}\"\n", data.display())).unwrap();
    let server = Server::start(&["--config", cfg.to_str().unwrap(), "--store", "memory"]);
    let mut acknowledged = Vec::new();
    for round in 0..5u64 {
        let id = format!("Full:{round}");
        let reply = server.call("DELETE", &format!("/v1/counters/{id}"), &[], "");
        assert_eq!(reply.status, 200, "{reply:?}");
        acknowledged.push(("counter.reset".to_owned(), id));

        // A policy edit whose record (about 6 KiB) no longer fits.
        let filler = disk.fill();
        let rules: Vec<Value> = (0..60)
            .map(|i| json!({"match": format!("Full{round}-{i:03}-padding:*"), "limit": i}))
            .collect();
        let body = json!({ "policies": rules }).to_string();
        let reply = server.call("PUT", "/v1/policies", &[], &body);
        assert_eq!(reply.status, 500, "round {round}: {reply:?}");
        let p = reply.json();
        assert_eq!(p["type"], "https://tollgate.dev/problems/audit-write-failed", "{p}");
        assert!(p["detail"].as_str().unwrap().contains("the change was made"), "{p}");
        std::fs::remove_file(filler).unwrap();

        // Every acknowledged change is listed, and only those; the file holds whole records.
        assert_eq!(actions(&audit(&server, None)), acknowledged, "round {round}");
        let text = std::fs::read_to_string(data.join("audit.jsonl")).unwrap();
        assert!(text.ends_with('\n'), "round {round}");
        assert!(text.lines().all(|l| serde_json::from_str::<Value>(l).is_ok()), "round {round}");
    }
}

/// An edit of the config file that changes the policies is recorded as `policies.reload` by
/// `config-file`, with the policies before and after; an edit the server refuses is not; an
/// edit made while the server was stopped is recorded when it starts.
#[test]
fn a_policy_reload_from_the_file_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tollgate.toml");
    let file = |limit: &str| {
        let data = dir.path().join("data");
        let text = format!(
            "[server]\ndata = \"{}\"\n\n[[policy]]\nmatch = \"R:*\"\nlimit = {limit}\nunit = \"day\"\n",
            data.display()
        );
        // An atomic rename, as editors and configuration tools write.
        let tmp = dir.path().join(".tollgate.toml.new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &cfg).unwrap();
    };
    file("10");
    let server = Server::start(&["--config", cfg.to_str().unwrap()]);
    let reloads = |server: &Server| -> Vec<Value> {
        let all = audit(server, None);
        all.into_iter().filter(|r| r["action"] == "policies.reload").collect()
    };
    assert!(reloads(&server).is_empty(), "start-up is not a reload");
    file("20");
    wait_until("the reload's record", Duration::from_secs(10), || reloads(&server).len() == 1);
    let r = &reloads(&server)[0];
    assert_eq!(
        (&r["who"], &r["role"], &r["target"]),
        (&json!("config-file"), &json!("limits"), &json!("policies"))
    );
    assert_eq!(r["before"][0]["limit"], 10, "{r}");
    assert_eq!(r["after"][0]["limit"], 20, "{r}");
    // A refused file changes nothing and records nothing; the next valid edit is recorded.
    file("-1");
    wait_until("the refusal", Duration::from_secs(10), || {
        server.call("GET", "/readyz", &[], "").json()["policies"]["last_error"].is_string()
    });
    assert_eq!(reloads(&server).len(), 1, "a refused file is no change");
    file("30");
    wait_until("the second reload's record", Duration::from_secs(10), || {
        reloads(&server).len() == 2
    });
    let limits = |r: &Value| (r["before"][0]["limit"].clone(), r["after"][0]["limit"].clone());
    assert_eq!(limits(&reloads(&server)[0]), (json!(20), json!(30)));

    // A restart on the file the log last recorded adds nothing; an edit made while the server
    // was down is recorded at the next start, from what the log last recorded.
    assert_eq!(server.sigterm().code(), Some(0));
    let server = Server::start(&["--config", cfg.to_str().unwrap()]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(reloads(&server).len(), 2, "an unchanged file is no change");
    assert_eq!(server.sigterm().code(), Some(0));
    file("40");
    let server = Server::start(&["--config", cfg.to_str().unwrap()]);
    wait_until("the edit made while stopped", Duration::from_secs(10), || {
        reloads(&server).len() == 3
    });
    assert_eq!(limits(&reloads(&server)[0]), (json!(30), json!(40)));
}
