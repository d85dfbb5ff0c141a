//! Bounding what one audit record may hold, so that a few large changes (a policy set of
//! thousands of rules) cannot fill the log and push other records out of it.
//!
//! When `before` and `after` together serialize to at most [`INLINE_BYTES`], both are kept
//! whole. Past that, each is replaced by its size and SHA-256 (`{"omitted": true, "bytes": N,
//! "sha256": "…"}`), and the record gets a `diff`: for two arrays, the elements `removed` and
//! `added` (compared by value); for two objects, the `changed` keys with their `before` and
//! `after`; entries are kept while they fit in [`DIFF_BYTES`] (half for what was removed, half
//! for what was added), and what did not fit is counted in `left_out` (`entries`, `bytes`). A record is therefore at most about
//! `INLINE_BYTES + DIFF_BYTES` plus its target.

use std::collections::HashMap;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// Before and after are stored whole up to this many bytes (together, as JSON).
pub const INLINE_BYTES: usize = 8 * 1024;
/// The most a record's `diff` entries take (as JSON); the rest is counted, not stored.
pub const DIFF_BYTES: usize = 16 * 1024;

/// `before`, `after` and a `diff` (when they had to be bounded) as the record stores them.
pub(super) fn bounded(before: Value, after: Value) -> (Value, Value, Option<Value>) {
    let (b, a) = (before.to_string(), after.to_string());
    if b.len() + a.len() <= INLINE_BYTES {
        return (before, after, None);
    }
    let diff = match (&before, &after) {
        (Value::Array(old), Value::Array(new)) => array_diff(old, new),
        (Value::Object(old), Value::Object(new)) => object_diff(old, new),
        _ => {
            let mut budget = Budget::new(DIFF_BYTES);
            budget.leave_out(b.len() + a.len());
            json!({ "left_out": budget.left_out() })
        }
    };
    (summary(&b), summary(&a), Some(diff))
}

/// Whether `recorded` (a record's `before` or `after`, whole or as its summary) is `state`.
pub fn records(recorded: &Value, state: &Value) -> bool {
    if recorded.get("omitted") == Some(&Value::Bool(true)) {
        let text = state.to_string();
        return recorded == &summary(&text);
    }
    recorded == state
}

fn summary(text: &str) -> Value {
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    json!({ "omitted": true, "bytes": text.len(), "sha256": hex })
}

/// Entries kept while they fit in `cap` bytes; the rest counted.
struct Budget {
    cap: usize,
    used: usize,
    left_entries: usize,
    left_bytes: usize,
}

impl Budget {
    fn new(cap: usize) -> Self {
        Self { cap, used: 0, left_entries: 0, left_bytes: 0 }
    }

    /// True (and counted as used) when an entry of `len` bytes (and its separator) still fits.
    fn take(&mut self, len: usize) -> bool {
        let len = len + 1;
        if self.left_entries == 0 && self.used + len <= self.cap {
            self.used += len;
            return true;
        }
        self.leave_out(len);
        false
    }

    fn leave_out(&mut self, len: usize) {
        self.left_entries += 1;
        self.left_bytes += len;
    }

    fn left_out(&self) -> Value {
        json!({ "entries": self.left_entries, "bytes": self.left_bytes })
    }

    /// What both budgets left out.
    fn left_out_of(a: &Budget, b: &Budget) -> Value {
        json!({
            "entries": a.left_entries + b.left_entries,
            "bytes": a.left_bytes + b.left_bytes,
        })
    }
}

/// The elements of `old` not in `new` (`removed`) and of `new` not in `old` (`added`), by
/// value, counting repeats.
fn array_diff(old: &[Value], new: &[Value]) -> Value {
    let texts = |v: &[Value]| v.iter().map(Value::to_string).collect::<Vec<_>>();
    let (old_t, new_t) = (texts(old), texts(new));
    let mut in_new: HashMap<&str, usize> = HashMap::new();
    for t in &new_t {
        *in_new.entry(t).or_default() += 1;
    }
    let (mut gone, mut came) = (Budget::new(DIFF_BYTES / 2), Budget::new(DIFF_BYTES / 2));
    let mut removed = Vec::new();
    for (v, t) in old.iter().zip(&old_t) {
        match in_new.get_mut(t.as_str()) {
            Some(n) if *n > 0 => *n -= 1,
            _ => {
                if gone.take(t.len()) {
                    removed.push(v.clone());
                }
            }
        }
    }
    let mut in_old: HashMap<&str, usize> = HashMap::new();
    for t in &old_t {
        *in_old.entry(t).or_default() += 1;
    }
    let mut added = Vec::new();
    for (v, t) in new.iter().zip(&new_t) {
        match in_old.get_mut(t.as_str()) {
            Some(n) if *n > 0 => *n -= 1,
            _ => {
                if came.take(t.len()) {
                    added.push(v.clone());
                }
            }
        }
    }
    json!({ "removed": removed, "added": added, "left_out": Budget::left_out_of(&gone, &came) })
}

/// The keys whose values differ, each with its `before` and `after` (`null` when absent).
fn object_diff(old: &Map<String, Value>, new: &Map<String, Value>) -> Value {
    let mut budget = Budget::new(DIFF_BYTES);
    let mut changed = Map::new();
    let keys = old.keys().chain(new.keys().filter(|k| !old.contains_key(*k)));
    for key in keys {
        let (b, a) = (old.get(key), new.get(key));
        if b == a {
            continue;
        }
        let entry = json!({ "before": b, "after": a });
        if budget.take(key.len() + entry.to_string().len()) {
            changed.insert(key.clone(), entry);
        }
    }
    json!({ "changed": changed, "left_out": budget.left_out() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_changes_are_kept_whole() {
        let (b, a, diff) = bounded(json!([1, 2]), json!({"x": 1}));
        assert_eq!((b, a, diff), (json!([1, 2]), json!({"x": 1}), None));
    }

    #[test]
    fn large_arrays_become_a_bounded_diff_by_value() {
        let old: Vec<Value> = (0..5000).map(|i| json!({"match": format!("A{i}:*")})).collect();
        let mut new = old.clone();
        new.remove(7);
        new.push(json!({"match": "Z:*"}));
        let (b, a, diff) = bounded(Value::Array(old), Value::Array(new));
        assert_eq!(b["omitted"], true);
        assert!(a["bytes"].as_u64().unwrap() > INLINE_BYTES as u64);
        let diff = diff.unwrap();
        assert_eq!(diff["removed"], json!([{"match": "A7:*"}]));
        assert_eq!(diff["added"], json!([{"match": "Z:*"}]));
        assert_eq!(diff["left_out"]["entries"], 0);

        // Everything changed: the diff stops at its budget and counts the rest.
        let old: Vec<Value> = (0..5000).map(|i| json!({"limit": i})).collect();
        let new: Vec<Value> = (0..5000).map(|i| json!({"limit": i + 1_000_000})).collect();
        let (_, _, diff) = bounded(Value::Array(old), Value::Array(new));
        let diff = diff.unwrap();
        assert!(diff.to_string().len() <= DIFF_BYTES + 200, "{}", diff.to_string().len());
        let kept =
            diff["removed"].as_array().unwrap().len() + diff["added"].as_array().unwrap().len();
        assert_eq!(kept as u64 + diff["left_out"]["entries"].as_u64().unwrap(), 10_000);
    }

    #[test]
    fn large_objects_keep_the_changed_keys() {
        let big = "x".repeat(INLINE_BYTES);
        let (_, _, diff) =
            bounded(json!({"a": 1, "blob": big, "c": 3}), json!({"a": 2, "blob": big, "d": 4}));
        let diff = diff.unwrap();
        let changed = diff["changed"].as_object().unwrap();
        let keys: Vec<&str> = changed.keys().map(String::as_str).collect();
        assert_eq!(keys, ["a", "c", "d"]);
        assert_eq!(changed["a"], json!({"before": 1, "after": 2}));
        assert_eq!(changed["d"], json!({"before": null, "after": 4}));
    }
}

#[cfg(test)]
mod records_tests {
    use super::*;

    #[test]
    fn a_state_is_recognised_whole_or_by_its_summary() {
        let small = json!([{"match": "a:*", "limit": 5}]);
        assert!(records(&small, &small));
        assert!(!records(&small, &json!([{"match": "a:*", "limit": 6}])));
        let big = json!(vec!["x".repeat(100); 100]);
        let (_, stored, _) = bounded(json!([]), big.clone());
        assert_eq!(stored["omitted"], true);
        assert!(records(&stored, &big));
        assert!(!records(&stored, &json!(vec!["y".repeat(100); 100])));
    }
}
