//! The Redis store's counter listing: the page's keys are chosen while scanning, then read.

use super::{Conn, RedisStore, key};
use crate::spec::WindowKind;
use crate::store::listing::Selection;
use crate::store::{CounterInfo, CounterListing, CounterPage, CounterPosition, StoreError};
use crate::window::{self, RollingLayout};

impl RedisStore {
    /// The listing's page: the keys of its positions are chosen while scanning (at most a
    /// page of them kept), then only those are read. A position whose keys all turn out ended
    /// is left off, so a page may be short while `next` is set.
    pub(super) async fn counters_shared(
        &self,
        listing: &CounterListing<'_>,
    ) -> Result<CounterPage, StoreError> {
        let mut conn = self.conn.clone();
        let targets = self.bounded(conn.scan_targets()).await?;
        let pattern = key::id_prefix_pattern(&self.opts.key_prefix, listing.prefix);
        let mut chosen = Selection::new(listing);
        self.scan_each(&pattern, &targets, |batch| {
            for k in batch {
                if let Some((id, shape, start)) = key::parse_key(&self.opts.key_prefix, &k) {
                    chosen.add(&id, &shape, (k, start));
                }
            }
        })
        .await?;
        let (chosen, next) = chosen.finish();
        let now = self.redis_now().await?;
        let mut out = Vec::new();
        for (position, keys) in chosen {
            for (key, window_start) in keys {
                if let Some(info) =
                    self.read_counter(&mut conn, &key, &position, window_start, now).await?
                {
                    out.push(info);
                }
            }
        }
        Ok(CounterPage { counters: out, next })
    }

    /// The counter held in `key` at `now`, or `None` when its window has ended or holds
    /// nothing.
    async fn read_counter(
        &self,
        conn: &mut Conn,
        key: &str,
        position: &CounterPosition,
        window_start: Option<i64>,
        now: i64,
    ) -> Result<Option<CounterInfo>, StoreError> {
        let shape = &position.shape;
        let fields: Vec<(String, String)> =
            self.bounded(redis::cmd("HGETALL").arg(key).query_async(conn)).await?;
        let field = |name: &str| -> u64 {
            fields.iter().find(|(k, _)| k == name).and_then(|(_, v)| v.parse().ok()).unwrap_or(0)
        };
        let (used, exceed, window, total) = match shape.window {
            WindowKind::Calendar => {
                let Some(start) = window_start else { return Ok(None) };
                let (s, e) = window::calendar_us(shape, start);
                if e <= now {
                    return Ok(None);
                }
                let tkey = format!("{}:t", key.rsplit_once(":w:").map_or("", |(b, _)| b));
                let total: Option<(Option<u64>, Option<i64>)> = self
                    .bounded(redis::cmd("HMGET").arg(&tkey).arg("t").arg("d").query_async(conn))
                    .await
                    .ok();
                let total = match total {
                    Some((Some(t), Some(d))) if now < d => t,
                    _ => 0,
                };
                (field("u"), field("x"), Some((s, e)), total)
            }
            WindowKind::Flexi => {
                let (used, mark) = (field("u"), field("m") as i64);
                let end = window::add_len(shape, mark);
                if used == 0 || end <= now {
                    return Ok(None);
                }
                (used, field("x"), Some((mark, end)), field("t"))
            }
            WindowKind::Rolling => {
                let first = RollingLayout::of(shape).first_counted(now);
                let (mut used, mut exceed) = (0, 0);
                for (k, v) in &fields {
                    // Field names come from Redis: split without assuming a char boundary.
                    let Some((tag, index)) = k.split_at_checked(1) else { continue };
                    let Ok(index) = index.parse::<i64>() else { continue };
                    let v = v.parse::<u64>().unwrap_or(0);
                    match tag {
                        "u" if index >= first => used += v,
                        "x" if index >= first => exceed += v,
                        _ => {}
                    }
                }
                if used == 0 && exceed == 0 {
                    return Ok(None);
                }
                (used, exceed, None, field("t"))
            }
        };
        let id = position.identifier.clone();
        Ok(Some(CounterInfo::new(id, shape, used, exceed, total, window)))
    }
}
