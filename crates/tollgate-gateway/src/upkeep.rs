//! The gateway's daily upkeep: what no one needs any more leaves the spool, so its disk use is
//! bounded by time, whatever partners send.
//!
//! - Dedup keys and delivered items older than the longest dedup window are dropped
//!   (`Spool::prune`).
//! - Rejected, duplicate and dead items received more than `keep_days` ago are purged through
//!   the pipeline's own purge, as an operator's would be (their spool bytes, fingerprints and
//!   claims let go, a page of items per batch); held and admitted items are never touched.
//!
//! It runs once at start and then once a day; a failure is logged and tried again the next
//! day (what it would have dropped stays meanwhile).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::watch;

use crate::bulk::each_page;
use crate::config::Plan;
use crate::filter::QueueFilter;
use crate::item::State;
use crate::pipeline::{AdminOp, Event};
use crate::spool::Spool;

/// The states purged after `keep_days`: items that wait for no one.
const EXPIRING: [State; 3] = [State::Rejected, State::Duplicate, State::Dead];

/// Runs the upkeep now and then once a day until `stop` changes.
pub(crate) async fn daily(
    spool: Arc<Spool>,
    events: UnboundedSender<Event>,
    plan: &Plan,
    mut stop: watch::Receiver<bool>,
) {
    let (horizon, keep) = (plan.longest_dedup(), plan.keep);
    loop {
        prune(&spool, horizon).await;
        expire(&spool, &events, keep).await;
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(Duration::from_secs(86_400)) => {}
        }
    }
}

/// Drops dedup keys and delivered items older than `horizon`.
async fn prune(spool: &Arc<Spool>, horizon: Duration) {
    let before = spool.now_ms() - millis(horizon);
    let s = spool.clone();
    match tokio::task::spawn_blocking(move || s.prune(before)).await {
        Ok(Ok(n)) => tracing::debug!(pruned = n, "dedup keys and delivered items pruned"),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "dedup prune failed; retried in a day (old keys stay meanwhile)")
        }
        Err(e) => tracing::error!(error = %e, "dedup prune task failed; retried in a day"),
    }
}

/// Purges the [`EXPIRING`] items received more than `keep` ago; returns how many.
pub(crate) async fn expire(
    spool: &Arc<Spool>,
    events: &UnboundedSender<Event>,
    keep: Duration,
) -> u64 {
    let before = spool.now_ms() - millis(keep);
    let never = AtomicBool::new(false);
    let mut purged = 0;
    for state in EXPIRING {
        let filter =
            QueueFilter { state: Some(state), to_ms: Some(before), ..QueueFilter::default() };
        let acted = each_page(spool, events, &filter, AdminOp::Purge, &never, |done| {
            purged += u64::from(done);
        });
        if let Err(e) = acted.await {
            tracing::error!(error = %e, %state, "purging expired items failed; retried in a day");
        }
    }
    if purged > 0 {
        let days = keep.as_secs() / 86_400;
        tracing::info!(
            purged,
            keep_days = days,
            "rejected, duplicate and dead items past keep_days purged"
        );
    }
    purged
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Instant;

    use tollgate_policy::Decider;
    use tollgate_quota::store::MemoryStore;
    use tollgate_quota::{AnyStore, ManualClock};

    use super::*;
    use crate::item::Item;
    use crate::{Gateway, GatewayClock, GatewayConfig};

    const DAY: Duration = Duration::from_secs(86_400);

    async fn gateway(dir: &Path, clock: &ManualClock) -> Gateway {
        let text = format!(
            "inbound = [\"{}\"]\npoll_ms = 10\nsettle_ms = 0\nkeep_days = 30\n\n[[route]]\nname = \"Status\"\ndocuments = [\"214\"]\nlimit = 100\nunit = \"day\"\ndeliver = \"dir:{}\"\n",
            dir.join("in").display(),
            dir.join("out").display(),
        );
        let config: GatewayConfig = toml::from_str(&text).unwrap();
        let store = Arc::new(AnyStore::Memory(MemoryStore::new()));
        Gateway::builder(config, &dir.join("data"), Decider::without_policies(store))
            .clock(GatewayClock::with_seed(Arc::new(clock.clone()), 7))
            .start()
            .await
            .unwrap()
    }

    /// Lands `bytes` as `name` and waits until the spool holds `n` items, none still on its way.
    async fn land(gw: &Gateway, dir: &Path, name: &str, bytes: &[u8], n: usize) -> Vec<Item> {
        std::fs::write(dir.join("in").join(name), bytes).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let items = gw.spool.items(None).unwrap();
            let settled = |i: &Item| !matches!(i.state, State::Received | State::Admitted);
            if items.len() == n && items.iter().all(settled) {
                return items;
            }
            assert!(Instant::now() < deadline, "{name}: {items:#?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn spooled(dir: &Path) -> usize {
        std::fs::read_dir(dir.join("data/spool")).unwrap().count()
    }

    /// Rejected items older than `keep_days` leave with their bytes; younger ones, and
    /// delivered ones (the dedup window's), stay.
    #[tokio::test]
    async fn rejected_items_past_keep_days_are_purged_with_their_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new("2026-03-02T10:00:00Z".parse().unwrap());
        let gw = gateway(dir.path(), &clock).await;
        let good = tollgate_testkit::Status214::new("CARRIERA", 1).build();
        let delivered = land(&gw, dir.path(), "a.edi", &good, 1).await;
        assert_eq!(delivered[0].state, State::Delivered);
        let old = land(&gw, dir.path(), "b.edi", b"not an interchange", 2).await;
        let old = old.into_iter().find(|i| i.state == State::Rejected).unwrap();
        clock.advance(DAY * 30 + Duration::from_secs(60));
        let all = land(&gw, dir.path(), "c.edi", b"nor is this one", 3).await;
        let files = spooled(dir.path());

        assert_eq!(expire(&gw.spool, &gw.events, DAY * 30).await, 1);
        let ids = |items: Vec<Item>| -> Vec<(String, State)> {
            let mut v: Vec<_> = items.into_iter().map(|i| (i.id, i.state)).collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        };
        let mut want = ids(all);
        want.retain(|(id, _)| *id != old.id);
        assert_eq!(ids(gw.spool.items(None).unwrap()), want);
        assert_eq!(spooled(dir.path()), files - 1, "its spool file went with it");
        assert_eq!(expire(&gw.spool, &gw.events, DAY * 30).await, 0, "once");
        gw.shutdown().await;
    }

    /// The upkeep and an operator purging the same expired items at once: each item is purged
    /// exactly once, by one or the other, and its bytes leave with it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_upkeep_and_an_operator_purge_each_item_once() {
        const N: usize = 60;
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new("2026-03-02T10:00:00Z".parse().unwrap());
        let gw = gateway(dir.path(), &clock).await;
        for i in 0..N - 1 {
            std::fs::write(dir.path().join(format!("in/r{i}.edi")), format!("junk {i}")).unwrap();
        }
        let items = land(&gw, dir.path(), "last.edi", b"junk", N).await;
        assert!(items.iter().all(|i| i.state == State::Rejected));
        clock.advance(DAY * 31);
        assert!(spooled(dir.path()) > 0);

        let operator = {
            let events = gw.events.clone();
            let ids: Vec<String> = items.iter().rev().map(|i| i.id.clone()).collect();
            tokio::spawn(async move {
                let mut replies = Vec::new();
                for id in ids {
                    let (reply, rx) = tokio::sync::oneshot::channel();
                    events
                        .send(Event::Admin { id, op: AdminOp::Purge, only_if: None, reply })
                        .unwrap();
                    replies.push(rx);
                    tokio::time::sleep(Duration::from_micros(300)).await;
                }
                let mut purged = 0;
                for rx in replies {
                    match rx.await.unwrap() {
                        Ok(None) => purged += 1,
                        Err(crate::pipeline::AdminError::NotFound) => {}
                        other => panic!("{other:?}"),
                    }
                }
                purged
            })
        };
        let by_upkeep = expire(&gw.spool, &gw.events, DAY * 30).await;
        let by_operator = operator.await.unwrap();
        eprintln!("purged by the upkeep {by_upkeep}, by the operator {by_operator}");
        assert_eq!(by_upkeep + by_operator, N as u64, "{by_upkeep} + {by_operator}");
        assert!(gw.spool.items(None).unwrap().is_empty());
        assert_eq!(spooled(dir.path()), 0, "every spool file went");
        gw.shutdown().await;
    }
}
