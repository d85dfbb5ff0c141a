//! The pipeline's use of the parser, through the test hooks on its one parse call
//! ([`crate::envelope::hooks`]): how often a file is parsed, and what a parser panic does;
//! and the held and duplicate units it reports to its store's observer.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate_http::AccessGuard;
use tollgate_policy::Decider;
use tollgate_quota::store::{DecisionObserver, MemoryStore, Withheld};
use tollgate_quota::{AnyStore, Decision, MeteringId};

use crate::envelope::hooks;
use crate::item::{Item, State};
use crate::{Gateway, GatewayConfig};

/// One X12 214 interchange from `ZZ:<sender>` with `txs` transactions of one AT7 each.
fn x12(sender: &str, control: u32, txs: usize) -> Vec<u8> {
    let mut s = format!(
        "ISA*00*          *00*          *ZZ*{sender:<15}*ZZ*RECEIVER       *240101*1200*U*00401*{control:09}*0*P*>~\n"
    );
    s.push_str(&format!("GS*QM*{sender}*RECEIVER*20240101*1200*{control}*X*004010~\n"));
    for t in 1..=txs {
        s.push_str(&format!("ST*214*{t:04}~\nB10*R{t}*S{t}*SCAC~\nAT7*X1*NS~\nSE*4*{t:04}~\n"));
    }
    s.push_str(&format!("GE*{txs}*{control}~\nIEA*1*{control:09}~\n"));
    s.into_bytes()
}

/// A gateway with a landing dir `in/`, a split route of `limit` per day into `out/` (no
/// window ends inside a test but at midnight UTC).
async fn gateway(dir: &Path, limit: u64) -> Gateway {
    gateway_on(dir, limit, Arc::new(AnyStore::Memory(MemoryStore::new()))).await
}

/// [`gateway`] metering on `store`.
async fn gateway_on(dir: &Path, limit: u64, store: Arc<AnyStore>) -> Gateway {
    let text = format!(
        r#"
inbound = ["{inbound}"]
poll_ms = 10
settle_ms = 0

[[route]]
name = "Status"
documents = ["214"]
limit = {limit}
interval = 1
unit = "day"
split = true
deliver = "dir:{out}"
"#,
        inbound = dir.join("in").display(),
        out = dir.join("out").display(),
    );
    let config: GatewayConfig = toml::from_str(&text).unwrap();
    Gateway::builder(config, &dir.join("data"), Decider::without_policies(store))
        .start()
        .await
        .unwrap()
}

/// Waits until `f` holds for the gateway's stored items (10 s at most).
async fn until(gw: &Gateway, what: &str, f: impl Fn(&[Item]) -> bool) -> Vec<Item> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let items = gw.spool.items(None).unwrap();
        if f(&items) {
            return items;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}: {items:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn count(items: &[Item], state: State) -> usize {
    items.iter().filter(|i| i.state == state).count()
}

#[tokio::test]
async fn a_landing_file_is_parsed_once_through_weighing_and_splitting() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), 3).await;
    hooks::count("PARSEONCE1");
    // Two interchanges of 5 transactions, limit 3: each is split (3 + 2, then 0 + 5 held).
    let mut file = x12("PARSEONCE1", 1, 5);
    file.extend(x12("PARSEONCE1", 2, 5));
    std::fs::write(dir.path().join("in/a.edi"), &file).unwrap();
    let items = until(&gw, "a split part delivered and the rest held", |items| {
        count(items, State::Delivered) == 1 && count(items, State::Held) == 2
    })
    .await;
    let part = items.iter().find(|i| i.state == State::Delivered).unwrap();
    assert_eq!(part.weight, 3);
    assert_eq!(part.layout, None, "a delivered item keeps no layout");
    let rest = items.iter().find(|i| i.id.ends_with("-1") && i.state == State::Held).unwrap();
    assert_eq!(rest.weight, 2);
    assert_eq!(rest.layout.as_ref().map(crate::envelope::Layout::weights), Some(vec![1, 1]));
    assert_eq!(hooks::parses("PARSEONCE1"), 1, "intake's parse is the only one");
    let runtime = std::thread::current().id();
    assert!(!hooks::threads("PARSEONCE1").contains(&runtime), "parsed on the runtime");
    gw.shutdown().await;
}

#[tokio::test]
async fn an_upload_is_parsed_once_off_the_runtime() {
    // The test's runtime runs on this thread only: a parse here would be on the runtime.
    let runtime = std::thread::current().id();
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), 3).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = gw.router(AccessGuard::new(None, true), Default::default());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    hooks::count("PARSEONCE2");
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/v1/interchanges"))
        .body(x12("PARSEONCE2", 1, 5))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    until(&gw, "the split part delivered", |items| count(items, State::Delivered) == 1).await;
    assert_eq!(hooks::parses("PARSEONCE2"), 1, "the upload's parse is the only one");
    assert!(!hooks::threads("PARSEONCE2").contains(&runtime), "parsed on the runtime");
    gw.shutdown().await;
}

#[tokio::test]
async fn a_parser_panic_rejects_that_file_only_and_frees_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), 1000).await;
    hooks::panic_on("PANICKING1");
    // Spooled directly and handed over in one event: one parse batch, no intake parse.
    let bad = x12("PANICKING1", 1, 1);
    let good = x12("FINE1", 1, 2);
    let mut recs =
        gw.spool.receive(&[(&bad[..], "bad".to_owned()), (&good[..], "good".to_owned())]).unwrap();
    for r in &mut recs {
        r.sender = r.origin.clone();
    }
    let (bad_id, good_id) = (recs[0].id.clone(), recs[1].id.clone());
    gw.events.send(super::Event::Received(recs)).unwrap();
    let items = until(&gw, "the good file delivered, the bad one rejected", |items| {
        count(items, State::Delivered) == 1 && count(items, State::Rejected) == 1
    })
    .await;
    let rejected = items.iter().find(|i| i.state == State::Rejected).unwrap();
    assert_eq!(rejected.id, bad_id);
    let reason = rejected.reason.as_deref().unwrap_or("");
    assert!(
        reason.starts_with("the parser failed on this file: injected parser panic"),
        "{reason}"
    );
    let delivered = items.iter().find(|i| i.state == State::Delivered).unwrap();
    assert_eq!(delivered.id, good_id);
    assert_eq!(delivered.weight, 2);
    // Neither file is left pending (it would be parsed again, or sit there, forever).
    assert!(gw.spool.pending_files().unwrap().is_empty());
    // The rejected item keeps the file's bytes for an operator.
    let bytes = gw.spool.read(&rejected.spool_file, rejected.start, rejected.end).unwrap();
    assert_eq!(bytes, bad);
    gw.shutdown().await;
}

#[tokio::test]
async fn an_item_stored_without_a_layout_is_still_split() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = x12("OLDITEM1", 1, 5);
    {
        // As stored before items kept their layout: the JSON has no `layout` key.
        let spool =
            crate::spool::Spool::open(&dir.path().join("data"), crate::SpoolOptions::default())
                .unwrap();
        let file = spool.store_part(&bytes).unwrap();
        let json = serde_json::json!({
            "id": "0000000000000001-000001", "state": "received", "admitted": false,
            "file": file, "start": 0, "end": bytes.len(), "partner": "ZZ:OLDITEM1",
            "sender": "ZZ:OLDITEM1", "receiver": "ZZ:RECEIVER", "control_number": "000000001",
            "document": "214", "route": "Status", "metering_id": "Status:ZZ:OLDITEM1",
            "weight": 5, "received_at": jiff::Timestamp::now().as_millisecond(), "next_attempt_at": null,
            "attempts": 0, "reason": null,
        });
        let item: Item = serde_json::from_value(json).unwrap();
        assert_eq!(item.layout, None);
        let change = crate::spool::Change { put: vec![item], ..Default::default() };
        spool.commit(&change).unwrap();
    }
    let gw = gateway(dir.path(), 3).await;
    let items = until(&gw, "the part that fits delivered, the rest held", |items| {
        count(items, State::Delivered) == 1 && count(items, State::Held) == 1
    })
    .await;
    let rest = items.iter().find(|i| i.state == State::Held).unwrap();
    assert_eq!(rest.weight, 2);
    assert_eq!(rest.layout.as_ref().map(crate::envelope::Layout::weights), Some(vec![1, 1]));
    gw.shutdown().await;
}

/// Writes down the units reported withheld, in order.
#[derive(Default)]
struct Withholdings(Mutex<Vec<(String, Withheld, u64)>>);

impl DecisionObserver for Withholdings {
    fn decided(&self, _: &MeteringId, _: &Decision) {}
    fn withheld(&self, id: &MeteringId, kind: Withheld, weight: u64) {
        self.0.lock().unwrap().push((id.to_string(), kind, weight));
    }
}

impl Withholdings {
    /// The units reported as `kind`, summed.
    fn total(&self, kind: Withheld) -> u64 {
        self.0.lock().unwrap().iter().filter(|(_, k, _)| *k == kind).map(|(_, _, w)| w).sum()
    }
}

fn weight_of(items: &[Item], state: State) -> u64 {
    items.iter().filter(|i| i.state == state).map(|i| i.weight).sum()
}

#[tokio::test]
async fn held_and_duplicate_units_are_reported_once_to_the_stores_observer() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(AnyStore::Memory(MemoryStore::new()));
    let notes = Arc::new(Withholdings::default());
    assert!(store.observe(notes.clone()));
    let gw = gateway_on(dir.path(), 3, store).await;
    // 5 transactions against 3 a day: 3 split off and delivered, 2 held.
    std::fs::write(dir.path().join("in/a.edi"), x12("WITHHOLD1", 1, 5)).unwrap();
    until(&gw, "a split part delivered and the rest held", |items| {
        count(items, State::Delivered) == 1 && count(items, State::Held) == 1
    })
    .await;
    // A second interchange waits behind the held one; the first, sent again, is a duplicate.
    let mut file = x12("WITHHOLD1", 2, 4);
    file.extend(x12("WITHHOLD1", 1, 5));
    std::fs::write(dir.path().join("in/b.edi"), &file).unwrap();
    let items = until(&gw, "two held and one duplicate", |items| {
        count(items, State::Held) == 2 && count(items, State::Duplicate) == 1
    })
    .await;
    assert_eq!(notes.total(Withheld::Held), 2 + 4);
    assert_eq!(notes.total(Withheld::Held), weight_of(&items, State::Held));
    assert_eq!(notes.total(Withheld::Duplicate), 5);
    assert_eq!(notes.total(Withheld::Duplicate), weight_of(&items, State::Duplicate));
    assert!(notes.0.lock().unwrap().iter().all(|(id, _, _)| id == "Status:ZZ:WITHHOLD1"));

    // An operator's retry of a held item that stays held is not reported again.
    let held = items.iter().find(|i| i.state == State::Held && i.control_number.ends_with('1'));
    let (reply, answer) = tokio::sync::oneshot::channel();
    let id = held.unwrap().id.clone();
    gw.events
        .send(super::Event::Admin { id, op: super::AdminOp::Retry, only_if: None, reply })
        .unwrap();
    let retried = answer.await.unwrap().unwrap().unwrap();
    assert_eq!((retried.state, retried.attempts), (State::Held, 0));
    assert_eq!(notes.0.lock().unwrap().len(), 3, "{:?}", notes.0.lock().unwrap());
    gw.shutdown().await;
}

/// The commit that splits a file into items fails (a full disk at that moment): it is written
/// with the next commit, so the file's `files` row and dedup keys are gone once its first item
/// is delivered, and a purge of another item holds. After a restart the file is not split
/// again: nothing is delivered twice, and the purged item does not come back. (The third item
/// stays held: its next try is at the window's end, midnight UTC.)
#[tokio::test]
async fn a_failed_commit_is_written_with_the_next_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), 1).await;
    crate::spool::hooks::fail_next_split(&dir.path().join("data"));
    let mut file = Vec::new();
    for control in 1..=3 {
        file.extend(x12("UNSAVED1", control, 1));
    }
    std::fs::write(dir.path().join("in/a.edi"), &file).unwrap();
    let items = until(&gw, "the first delivered, the others held", |items| {
        count(items, State::Delivered) == 1 && count(items, State::Held) == 2
    })
    .await;
    assert!(gw.spool.pending_files().unwrap().is_empty(), "the file's row went");
    let delivered = items.iter().find(|i| i.state == State::Delivered).unwrap().id.clone();
    let purged = items.iter().find(|i| i.state == State::Held).unwrap().id.clone();
    let (reply, answer) = tokio::sync::oneshot::channel();
    let purge =
        super::Event::Admin { id: purged.clone(), op: super::AdminOp::Purge, only_if: None, reply };
    gw.events.send(purge).unwrap();
    assert!(answer.await.unwrap().is_ok(), "the purge is answered as done");
    gw.shutdown().await;
    let out = dir.path().join("out");
    std::fs::remove_file(out.join(format!("{delivered}.edi"))).unwrap();

    let gw = gateway(dir.path(), 5).await;
    assert!(gw.spool.pending_files().unwrap().is_empty(), "no file to split again");
    // Time for a split and a delivery, had the file been taken in again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let items = gw.spool.items(None).unwrap();
    let states: Vec<_> = items.iter().map(|i| (i.id.as_str(), i.state)).collect();
    assert_eq!(states.len(), 2, "the purged item came back: {states:?}");
    assert!(items.iter().all(|i| i.id != purged), "the purged item came back: {states:?}");
    gw.shutdown().await;
    assert!(!out.join(format!("{delivered}.edi")).exists(), "delivered twice");
    assert!(!out.join(format!("{purged}.edi")).exists(), "the purged item was delivered");
}

/// A split whose parts cannot be written gives back the units its kept transactions were
/// counted for: the item is held and metered again later, so they would be counted twice.
#[tokio::test]
async fn a_split_that_cannot_be_written_gives_its_units_back() {
    use tollgate_quota::store::{EmbeddedOptions, EmbeddedStore};
    use tollgate_quota::{CounterListing, Store};

    let dir = tempfile::tempdir().unwrap();
    let counters = EmbeddedStore::open(EmbeddedOptions::new(dir.path().join("c.redb"))).unwrap();
    let store = Arc::new(AnyStore::Embedded(counters));
    let gw = gateway_on(dir.path(), 3, Arc::clone(&store)).await;
    crate::spool::hooks::fail_part_after(&dir.path().join("data"), 0);
    std::fs::write(dir.path().join("in/a.edi"), x12("GIVEBACK1", 1, 5)).unwrap();
    until(&gw, "held after the split failed", |items| {
        items.iter().any(|i| i.reason.as_deref().is_some_and(|r| r.contains("split failed")))
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let used: u64 = store
            .counters(&CounterListing::all(""))
            .await
            .unwrap()
            .counters
            .iter()
            .map(|c| c.used)
            .sum();
        if used == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{used} units still counted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gw.shutdown().await;
}

/// While commits fail (a full disk), an item released and delivered is known as delivered
/// only to the batch kept for the next commit; an operator who repeats the release (the first
/// answered 503) does not have it delivered again, as the stored row, still held, did.
#[tokio::test]
async fn a_release_repeated_while_commits_fail_does_not_deliver_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, held) = one_delivered_one_held(dir.path(), "REPEATREL").await;
    let out = dir.path().join("out").join(format!("{held}.edi"));
    let data = dir.path().join("data");
    crate::spool::hooks::fail_every_commit(&data);
    let release = |id: String| {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let op = super::AdminOp::Release;
        gw.events.send(super::Event::Admin { id, op, only_if: None, reply }).unwrap();
        answer
    };
    let _ = release(held.clone()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !out.exists() {
        assert!(Instant::now() < deadline, "never delivered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    std::fs::remove_file(&out).unwrap(); // the receiver took it
    tokio::time::sleep(Duration::from_millis(300)).await; // its result applied in memory
    assert_eq!(gw.spool.item(&held).unwrap().unwrap().state, State::Held, "the row is stale");
    let second = release(held.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let again = out.exists();
    crate::spool::hooks::let_commits_through(&data);
    gw.shutdown().await;
    assert!(!again, "delivered twice");
    // Refused (delivered); the answer itself is the commit's failure, 503 to an operator.
    assert!(second.is_err(), "{second:?}");
}

/// A bulk job's purge runs on the item as it is then, not as its page read it: an item that
/// no longer passes the job's filter (an operator released a held one meanwhile; here a held
/// one under a filter for dead ones) is skipped, not purged.
#[tokio::test]
async fn a_bulk_purge_skips_an_item_that_no_longer_passes_its_filter() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, held) = one_delivered_one_held(dir.path(), "STALEPAGE").await;
    let filter = crate::filter::QueueFilter { state: Some(State::Dead), ..Default::default() };
    let (reply, answer) = tokio::sync::oneshot::channel();
    let (op, only_if) = (super::AdminOp::Purge, Some(std::sync::Arc::new(filter)));
    gw.events.send(super::Event::Admin { id: held.clone(), op, only_if, reply }).unwrap();
    let answer = answer.await.unwrap();
    assert!(
        matches!(&answer, Err(super::AdminError::Conflict(m)) if m.contains("held")),
        "{answer:?}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(gw.spool.item(&held).unwrap().map(|i| i.state), Some(State::Held));
    gw.shutdown().await;
}

/// A gateway admitting one a day, given two interchanges of `sender`: the first delivered,
/// the second held; the held one's id.
async fn one_delivered_one_held(dir: &Path, sender: &str) -> (Gateway, String) {
    let gw = gateway(dir, 1).await;
    let mut file = Vec::new();
    for control in 1..=2 {
        file.extend(x12(sender, control, 1));
    }
    std::fs::write(dir.join("in/a.edi"), &file).unwrap();
    let items = until(&gw, "one delivered, one held", |items| {
        count(items, State::Delivered) == 1 && count(items, State::Held) == 1
    })
    .await;
    let held = items.iter().find(|i| i.state == State::Held).unwrap().id.clone();
    (gw, held)
}
