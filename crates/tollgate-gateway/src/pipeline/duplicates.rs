//! Duplicates: removing resent transactions before metering, on `dedup = "transaction"`
//! routes.
//!
//! Each transaction of such a route's item has a fingerprint, kept in its layout from the one
//! parse. Before each metering of the item its fingerprints are looked up, keyed by partner,
//! receiver and document type, in the server's store (shared by every instance on it), so the
//! same content sent to two receivers is two genuine transactions:
//! - none was seen: the item is metered as it is;
//! - all were: the item becomes `duplicate` and consumes nothing, naming the item that holds
//!   the claim (`duplicate_of`);
//! - some were: they are cut out into a `duplicate` item of their own (a well-formed
//!   interchange, whose reason names the transactions and the original), and the item goes on
//!   with the others in a rebuilt envelope (new control numbers and counts, as `split` does),
//!   its weight counted again.
//!
//! Invariants:
//! - **Seen means admitted.** An item claims its new fingerprints before it is metered and
//!   keeps them only while it is admitted: held or dead, it releases them
//!   ([`Pipeline::settle_claims`]); purged before it was delivered, it returns them
//!   ([`Pipeline::return_claims`]), so the partner's resend goes through. So a held
//!   transaction is not yet seen, and of two copies metered at once (two instances on one
//!   Redis) only the one holding the claim goes on.
//! - **A claim is the item's.** Its owner is this gateway's instance id and the item id, so an
//!   item that crashed between its claim and the commit of its admission claims the same keys
//!   again after the restart, and is not its own duplicate.
//! - **An outage never drops a transaction.** When the store cannot answer, the gateway's
//!   `on_unavailable` decides, as for quota: `deliver` meters the item as it is (counted in
//!   `tollgate_gateway_dedup_skipped_total`), `hold` holds it until the store answers. Nothing
//!   is called a duplicate because of an error.
//! - **A copy costs a read.** Copies are found with a lookup; only new transactions are
//!   written to the store.

use tollgate_quota::Seen;

use super::*;
use crate::config::Dedup;

/// Whether an item goes on to metering after its copies were looked for, and the fingerprint
/// keys it claimed on the way (to be kept only if it is admitted).
pub(super) enum Copies {
    /// Meter the item (new, stripped of its copies, or not looked at during an outage).
    Meter(Vec<String>),
    /// Do not meter it now: it is a duplicate, or held (store down, or rebuilding failed).
    Stop(Vec<String>),
}

/// The store key of a transaction fingerprint: partner, receiver and document type, then the
/// fingerprint. The partner's and the receiver's lengths come first, so no two (partner,
/// receiver, document) triples give one prefix.
pub fn fingerprint_key(partner: &str, receiver: &str, document: &str, fingerprint: &str) -> String {
    let (p, r) = (partner.len(), receiver.len());
    format!("tx:{p}:{r}:{partner}{receiver}{document}:{fingerprint}")
}

/// The item id in a claim's owner (`<instance>/<item id>`, see [`Pipeline::owner`]).
fn item_of(owner: &str) -> &str {
    owner.split_once('/').map_or(owner, |(_, id)| id)
}

/// The fingerprint keys of an item's transactions, in order (none without fingerprints).
fn keys_of(item: &Item) -> Vec<String> {
    let Some(layout) = &item.layout else { return Vec::new() };
    layout
        .fingerprints
        .iter()
        .map(|fp| fingerprint_key(&item.partner, &item.receiver, &item.document, fp))
        .collect()
}

/// `[1, 4, 5]` as `"2, 5, 6"` (transactions are numbered from 1 for people).
fn numbered(at: &[usize]) -> String {
    at.iter().map(|i| (i + 1).to_string()).collect::<Vec<_>>().join(", ")
}

impl Pipeline {
    /// Who claims fingerprints for item `id`: this instance, then the item.
    fn owner(&self, id: &str) -> String {
        format!("{:016x}/{id}", self.parts.spool.instance())
    }

    /// Looks up the item's transactions, claims the new ones and removes the copies (see the
    /// module docs). Items stored without fingerprints (the route removes resent transactions
    /// since they were received) are metered as they are.
    pub(super) async fn remove_copies(
        &mut self,
        id: &str,
        route: &Route,
        batch: &mut Batch,
    ) -> Copies {
        let Some(item) = self.live.get(id) else { return Copies::Stop(Vec::new()) };
        let keys = keys_of(item);
        if keys.is_empty() {
            return Copies::Meter(Vec::new());
        }
        let owner = self.owner(id);
        let all: Vec<&str> = keys.iter().map(String::as_str).collect();
        let holders = match self.parts.seen.holders(&all, &owner).await {
            Ok(holders) => holders,
            Err(e) => return self.dedup_unavailable(id, &e.to_string(), batch),
        };
        let mut copy: Vec<bool> = holders.iter().map(Option::is_some).collect();
        // The items whose claims the copies matched (the first holder named).
        let original = holders.iter().flatten().next().map(|o| item_of(o).to_owned());
        // A transaction repeated within the item is a copy of its first occurrence.
        let mut firsts = HashSet::new();
        for (i, k) in keys.iter().enumerate() {
            if !firsts.insert(k.as_str()) {
                copy[i] = true;
            }
        }
        let fresh: Vec<usize> = (0..keys.len()).filter(|&i| !copy[i]).collect();
        let mut claimed = Vec::new();
        if !fresh.is_empty() {
            let wanted: Vec<&str> = fresh.iter().map(|&i| keys[i].as_str()).collect();
            match self.parts.seen.claim(&wanted, &owner, route.dedup_window).await {
                Ok(got) => {
                    for (&i, ours) in fresh.iter().zip(got) {
                        if ours {
                            claimed.push(keys[i].clone());
                        } else {
                            // Claimed by another item since the lookup.
                            copy[i] = true;
                        }
                    }
                }
                Err(e) => return self.dedup_unavailable(id, &e.to_string(), batch),
            }
        }
        let copies: Vec<usize> = (0..keys.len()).filter(|&i| copy[i]).collect();
        if copies.is_empty() {
            Copies::Meter(claimed)
        } else if copies.len() == keys.len() {
            self.quarantine(id, route, original, batch);
            Copies::Stop(claimed)
        } else if self.cut_copies(id, route, &copies, original, batch).await {
            Copies::Meter(claimed)
        } else {
            Copies::Stop(claimed)
        }
    }

    /// The store could not answer: deliver the item as it is, or hold it, as `on_unavailable`
    /// says for quota.
    fn dedup_unavailable(&mut self, id: &str, why: &str, batch: &mut Batch) -> Copies {
        match self.parts.plan.on_unavailable {
            OnQuotaUnavailable::Deliver => {
                tracing::warn!(item = id, error = %why, "fingerprint store unavailable; metering without removing resent transactions");
                if let Some(i) = self.live.get(id) {
                    telemetry::count(Counter::DedupSkipped, i, &self.parts.plan);
                }
                Copies::Meter(Vec::new())
            }
            OnQuotaUnavailable::Hold => {
                let reason = format!("fingerprint store unavailable: {why}");
                self.hold(id, UNAVAILABLE_RETRY, reason, batch);
                Copies::Stop(Vec::new())
            }
        }
    }

    /// Every transaction of the item was seen: it becomes `duplicate` and consumes nothing.
    fn quarantine(&mut self, id: &str, route: &Route, original: Option<String>, batch: &mut Batch) {
        let Some(mut item) = self.live.remove(id) else { return };
        if let Some(m) = &item.metering_id {
            self.held.remove(m, id);
        }
        let n = keys_of(&item).len();
        item.state = State::Duplicate;
        item.next_attempt_at = None;
        item.reason = Some(format!(
            "all {n} transactions were sent before by {} to {} as {} within {} days{}",
            item.partner,
            item.receiver,
            item.document,
            route.dedup_window.as_secs() / 86_400,
            original.as_ref().map(|o| format!(" (first as item {o})")).unwrap_or_default(),
        ));
        item.duplicate_of = original;
        tracing::info!(item = id, transactions = n, "duplicate: every transaction was sent before");
        telemetry::count(Counter::Duplicate, &item, &self.parts.plan);
        telemetry::count_by(Counter::DuplicateTransactions, &item, &self.parts.plan, n as u64);
        self.parts.meter.duplicate(&item);
        batch.put(&item);
        if let Some(m) = item.metering_id.clone() {
            telemetry::held_depth(&self.parts.plan, &item, self.held.depth(&m));
        }
    }

    /// Cuts the transactions at `copies` out of the item into a `duplicate` item, and rebuilds
    /// the item with the others. False (the item held) when the parts could not be written.
    async fn cut_copies(
        &mut self,
        id: &str,
        route: &Route,
        copies: &[usize],
        original: Option<String>,
        batch: &mut Batch,
    ) -> bool {
        let Some(item) = self.live.get(id).cloned() else { return false };
        let Some(layout) = item.layout.clone() else { return false };
        let total = layout.transactions();
        let keep: Vec<usize> = (0..total).filter(|i| !copies.contains(i)).collect();
        let parts = self.parts.clone();
        let (file, start, end) = (item.spool_file.clone(), item.start, item.end);
        let (kept_count, cut) = (keep.len(), copies.to_vec());
        let written = tokio::task::spawn_blocking(move || -> Result<_, String> {
            let bytes = parts.spool.read(&file, start, end).map_err(|e| e.to_string())?;
            let c1 = parts.spool.next_control_number().map_err(|e| e.to_string())?;
            let c2 = parts.spool.next_control_number().map_err(|e| e.to_string())?;
            let (kept, kept_layout) = envelope::split(&bytes, &layout, &keep, c1)
                .ok_or("rebuilding the envelope without the resent transactions failed")?;
            let (copied, copied_layout) = envelope::split(&bytes, &layout, &cut, c2)
                .ok_or("rebuilding the envelope of the resent transactions failed")?;
            let (fk, fc) = parts.spool.store_parts(&kept, &copied).map_err(|e| e.to_string())?;
            Ok((fk, kept.len() as u64, kept_layout, c2, fc, copied.len() as u64, copied_layout))
        })
        .await;
        let (fk, klen, kept_layout, c2, fc, clen, copied_layout) = match written {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => return self.hold_after_split_failure(id, e, batch),
            Err(e) => return self.hold_after_split_failure(id, e.to_string(), batch),
        };
        let dup_id = format!("{id}-d{c2:09}");
        let days = route.dedup_window.as_secs() / 86_400;
        let dup = Item {
            id: dup_id.clone(),
            state: State::Duplicate,
            spool_file: fc.clone(),
            start: 0,
            end: clen,
            weight: copied_layout.weights().iter().sum(),
            next_attempt_at: None,
            attempts: 0,
            reason: Some(format!(
                "transactions {} of {total} in interchange {} of item {id} were sent before by \
                 {} to {} as {} within {days} days{}; the other {} go on as item {id}",
                numbered(copies),
                item.control_number,
                item.partner,
                item.receiver,
                item.document,
                original.as_ref().map(|o| format!(" (first as item {o})")).unwrap_or_default(),
                kept_count,
            )),
            duplicate_of: original,
            layout: Some(copied_layout),
            ..Item::clone(&item)
        };
        tracing::info!(item = id, duplicate = %dup_id, resent = copies.len(), kept = kept_count, "resent transactions removed");
        telemetry::count(Counter::Duplicate, &dup, &self.parts.plan);
        self.parts.meter.duplicate(&dup);
        telemetry::count_by(
            Counter::DuplicateTransactions,
            &dup,
            &self.parts.plan,
            copies.len() as u64,
        );
        self.hold_file(&fk, id);
        self.hold_file(&fc, &dup_id);
        self.release_file(&item.spool_file, id, batch);
        batch.put(&dup);
        if let Some(live) = self.live.get_mut(id) {
            live.weight = kept_layout.weights().iter().sum::<u64>().max(route.min_weight);
            live.spool_file = fk;
            live.start = 0;
            live.end = klen;
            live.layout = Some(kept_layout);
            batch.put(live);
        }
        true
    }

    /// An operator released item `id` (delivered without metering): its transactions are
    /// admitted, so on a `dedup = "transaction"` route their fingerprints are claimed for it
    /// where no other item holds them. A failure is logged; the release goes on.
    pub(super) async fn claim_released(&mut self, id: &str) {
        let Some(item) = self.live.get(id) else { return };
        let Some((route, _)) = self.route_of(item) else { return };
        let keys = keys_of(item);
        if route.dedup != Dedup::Transaction || keys.is_empty() {
            return;
        }
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        if let Err(e) = self.parts.seen.claim(&keys, &self.owner(id), route.dedup_window).await {
            tracing::warn!(item = id, error = %e, "released without recording its fingerprints");
        }
    }

    /// A purged item that was not delivered gives its fingerprints back, so the partner's
    /// resend is not called a copy of something the target never got. A failure is logged;
    /// the keys then expire with their dedup window.
    pub(super) async fn return_claims(&self, item: &Item) {
        let keys = keys_of(item);
        if keys.is_empty() {
            return;
        }
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        if let Err(e) = self.parts.seen.release(&keys, &self.owner(&item.id)).await {
            tracing::warn!(item = %item.id, error = %e, "returning the fingerprints of a purged item failed");
        }
    }

    /// Keeps the fingerprints `claimed` for item `id` only if it is admitted: a held item
    /// releases those it still holds, a dead one all of them (see the module invariants).
    pub(super) async fn settle_claims(&mut self, id: &str, claimed: Vec<String>) {
        if claimed.is_empty() {
            return;
        }
        let release: Vec<String> = match self.live.get(id) {
            Some(item) if item.state == State::Admitted => return,
            Some(item) => {
                let current: HashSet<String> = keys_of(item).into_iter().collect();
                claimed.into_iter().filter(|k| current.contains(k)).collect()
            }
            None => claimed,
        };
        if release.is_empty() {
            return;
        }
        let keys: Vec<&str> = release.iter().map(String::as_str).collect();
        if let Err(e) = self.parts.seen.release(&keys, &self.owner(id)).await {
            // The keys stay this item's until they expire: the item itself claims them again,
            // while a copy of them meanwhile is kept as a duplicate an operator can release.
            tracing::warn!(item = id, error = %e, "releasing the fingerprints of an item not admitted failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_separate_partner_from_document() {
        assert_ne!(fingerprint_key("ab", "r", "c", "f"), fingerprint_key("a", "r", "bc", "f"));
        assert_ne!(fingerprint_key("a", "bc", "d", "f"), fingerprint_key("a", "b", "cd", "f"));
        assert_ne!(fingerprint_key("a", "EU", "214", "f"), fingerprint_key("a", "US", "214", "f"));
        assert_eq!(fingerprint_key("acme", "ZZ:ERP", "214", "00ff"), "tx:4:6:acmeZZ:ERP214:00ff");
        assert_eq!(item_of("00000000000000ab/F-1"), "F-1");
        assert_eq!(numbered(&[0, 3, 4]), "1, 4, 5");
    }
}
