//! Sending to a real HTTP receiver on a loopback port (the testkit's stub).

use std::sync::atomic::{AtomicUsize, Ordering};

use tollgate_testkit::http::{HttpStub, Message};

use super::*;
use crate::sign::Secret;

/// A receiver answering the statuses of `script` in turn (200 once it runs out), and what
/// it received.
fn receiver(script: Vec<u16>) -> (HttpStub, Arc<Mutex<Vec<Message>>>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let calls = AtomicUsize::new(0);
    let kept = Arc::clone(&got);
    let stub = HttpStub::start(move |m| {
        kept.lock().unwrap().push(m.clone());
        let n = calls.fetch_add(1, Ordering::SeqCst);
        Message::reply(script.get(n).copied().unwrap_or(200), "")
    });
    (stub, got)
}

fn webhook(url: &str, events: Vec<EventKind>) -> Webhook {
    Webhook {
        name: "ops".into(),
        url: format!("{url}/hooks/SECRET-PATH").parse().unwrap(),
        secret: Secret::new(b"k3y").unwrap(),
        events,
    }
}

fn fast() -> SendOptions {
    SendOptions { first_retry: Duration::from_millis(20), ..SendOptions::default() }
}

fn held(partner: &str) -> Event {
    Event {
        event: EventKind::PartnerHeld,
        partner: Some(partner.into()),
        metering_id: Some(format!("ShipmentStatus:{partner}")),
        at: "2026-12-02T04:13:23Z".parse().unwrap(),
        held: 3,
        held_units: 30,
        duplicates: 0,
    }
}

/// Waits (10 s at most) until `got` has `n` requests.
async fn wait_for(got: &Mutex<Vec<Message>>, n: usize) {
    for _ in 0..1000 {
        if got.lock().unwrap().len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the receiver got {} requests, not {n}", got.lock().unwrap().len());
}

#[tokio::test]
async fn an_event_is_posted_signed_to_the_webhooks_that_want_it() {
    let (stub, got) = receiver(vec![]);
    let (other, other_got) = receiver(vec![]);
    let hooks = vec![
        webhook(&stub.url(), EventKind::WATCHED.to_vec()),
        Webhook {
            name: "releases".into(),
            ..webhook(&other.url(), vec![EventKind::PartnerReleased])
        },
    ];
    let n = Notifier::start(hooks.into_iter().map(Channel::from).collect(), fast()).unwrap();
    n.publish(&held("CarrierXYZ"));
    wait_for(&got, 1).await;
    let m = got.lock().unwrap()[0].clone();
    assert_eq!((m.method.as_str(), m.path.as_str()), ("POST", "/hooks/SECRET-PATH"));
    assert_eq!(m.header("content-type"), Some("application/json"));
    assert_eq!(m.header("x-tollgate-event"), Some("partner_held"));
    let key = Secret::new(b"k3y").unwrap();
    assert_eq!(m.header("x-tollgate-signature"), Some(signature(&key, &m.body).as_str()));
    assert_eq!(m.json()["partner"], "CarrierXYZ");
    assert_eq!(m.json()["metering_id"], "ShipmentStatus:CarrierXYZ");
    // The other webhook wants only releases: a test reaches it, the held event did not.
    let outcomes = n.test().await;
    assert_eq!(outcomes.len(), 2);
    assert!(outcomes.iter().all(|o| o.ok && o.status == Some(200)), "{outcomes:?}");
    assert_eq!(outcomes[1].target, other.url());
    let other_got = other_got.lock().unwrap();
    assert_eq!(other_got.len(), 1);
    assert_eq!(other_got[0].json()["event"], "test");
}

#[tokio::test]
async fn a_5xx_is_retried_and_a_4xx_is_not() {
    let (stub, got) = receiver(vec![500, 503, 200]);
    let n = Notifier::start(vec![webhook(&stub.url(), EventKind::WATCHED.to_vec()).into()], fast())
        .unwrap();
    n.publish(&held("A"));
    wait_for(&got, 3).await;
    let bodies: Vec<Vec<u8>> = got.lock().unwrap().iter().map(|m| m.body.clone()).collect();
    assert!(bodies.iter().all(|b| *b == bodies[0]), "the same body each time");

    let (stub, got) = receiver(vec![400, 200]);
    let n = Notifier::start(vec![webhook(&stub.url(), EventKind::WATCHED.to_vec()).into()], fast())
        .unwrap();
    n.publish(&held("A"));
    n.publish(&held("B"));
    wait_for(&got, 2).await;
    // A was refused with 400 and not tried again: the second request is B's.
    assert_eq!(got.lock().unwrap()[1].json()["partner"], "B");
}

#[tokio::test]
async fn retries_stop_after_the_last_attempt() {
    let (stub, got) = receiver(vec![500; 10]);
    let options = SendOptions { attempts: 3, ..fast() };
    let n =
        Notifier::start(vec![webhook(&stub.url(), EventKind::WATCHED.to_vec()).into()], options)
            .unwrap();
    n.publish(&held("A"));
    n.publish(&held("B"));
    wait_for(&got, 6).await;
    let partners: Vec<String> =
        got.lock().unwrap().iter().map(|m| m.json()["partner"].to_string()).collect();
    assert_eq!(partners, ["\"A\"", "\"A\"", "\"A\"", "\"B\"", "\"B\"", "\"B\""]);
}

#[test]
fn a_full_queue_drops_its_oldest_event() {
    let (stub, got) = receiver(vec![]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let options = SendOptions { queue_len: 2, ..fast() };
        let n = Notifier::start(
            vec![webhook(&stub.url(), EventKind::WATCHED.to_vec()).into()],
            options,
        )
        .unwrap();
        // One thread, no await in between: the sending task has not run yet.
        for p in ["A", "B", "C", "D"] {
            n.publish(&held(p));
        }
        wait_for(&got, 2).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let partners: Vec<String> =
            got.lock().unwrap().iter().map(|m| m.json()["partner"].to_string()).collect();
        assert_eq!(partners, ["\"C\"", "\"D\""]);
    });
}

#[tokio::test]
async fn a_test_says_what_failed_without_the_url() {
    // A port nothing listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (stub, _) = receiver(vec![404]);
    let hooks = vec![
        webhook(&format!("http://127.0.0.1:{port}"), EventKind::WATCHED.to_vec()),
        Webhook { name: "second".into(), ..webhook(&stub.url(), vec![]) },
    ];
    let n = Notifier::start(hooks.into_iter().map(Channel::from).collect(), fast()).unwrap();
    let outcomes = n.test().await;
    assert_eq!(outcomes[0].status, None);
    assert!(!outcomes[0].ok);
    let error = outcomes[0].error.clone().unwrap();
    assert!(error.starts_with("cannot connect"), "{error}");
    assert!(!error.contains("SECRET"), "{error}");
    assert_eq!(outcomes[0].target, format!("http://127.0.0.1:{port}"));
    assert_eq!(outcomes[0].kind, "webhook");
    assert_eq!((outcomes[1].status, outcomes[1].ok), (Some(404), false));
    assert_eq!(outcomes[1].error.as_deref(), Some("answered HTTP 404 Not Found"));
    assert_eq!(format!("{n:?}"), "Notifier { channels: [\"ops\", \"second\"] }");
}
