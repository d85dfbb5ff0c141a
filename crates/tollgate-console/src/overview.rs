//! The overview: one row per metering id with its use against its limit, the time until its
//! window resets and a state (ok, near, exceeded, shadow would-reject), filtered, sorted and
//! cut into pages on the server, so a store with 10,000 ids still answers in one small page.
//!
//! A row's limit is the one in force, resolved as every face resolves it
//! (`tollgate_policy::PolicySet::resolve`): the gateway route whose metering id template the
//! id fits asks its limit, and the first `[[policy]]` matching the id fills it in or, with
//! `override`, replaces it; `limit_source` says whose it is. An id of no route takes a
//! policy's limit; without either the limit is unknown (the quota headers of each request
//! carried it) and the state is `ok`.

use std::cmp::Ordering;
use std::collections::HashMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use tollgate_gateway::{State, StateCounts, TallyKey};
use tollgate_policy::{Asked, LimitSource, PolicyMode, PolicySet};
use tollgate_quota::TimeUnit;
use tollgate_quota::{CounterInfo, MeteringId, WindowKind};

/// Rows per page when the query names none.
pub(crate) const DEFAULT_PER_PAGE: usize = 100;
/// The most rows one page holds.
pub(crate) const MAX_PER_PAGE: usize = 500;
/// From this share of the limit on (in percent), a row is `near`.
pub(crate) const NEAR_PERCENT: u64 = 80;

/// A gateway route's limit, as the console shows it.
#[derive(Debug, Clone, Serialize)]
pub struct RouteLimit {
    /// The route's name.
    pub name: String,
    /// Its document types.
    pub documents: Vec<String>,
    /// The metering id template (`{route}:{partner}` by default).
    pub metering_id: String,
    /// Units per window.
    pub limit: u64,
    /// Window length in `unit`s.
    pub interval: u32,
    /// The window's unit.
    pub unit: TimeUnit,
}

impl RouteLimit {
    /// The partner part of `id` when `id` fits this route's template.
    pub fn partner_of<'a>(&self, id: &'a str) -> Option<&'a str> {
        Template::of(self).partner_of(id)
    }
}

/// A route's metering id template with `{route}` filled in, split at `{partner}`: built once
/// per overview, not once per id.
struct Template<'r> {
    route: &'r RouteLimit,
    before: String,
    /// `None` when the template has no `{partner}` (the id is `before` exactly).
    after: Option<String>,
}

impl<'r> Template<'r> {
    fn of(route: &'r RouteLimit) -> Self {
        let filled = route.metering_id.replace("{route}", &route.name);
        match filled.split_once("{partner}") {
            Some((b, a)) => Self { route, before: b.to_owned(), after: Some(a.to_owned()) },
            None => Self { route, before: filled, after: None },
        }
    }

    fn partner_of<'a>(&self, id: &'a str) -> Option<&'a str> {
        match &self.after {
            Some(after) => id
                .strip_prefix(self.before.as_str())
                .and_then(|rest| rest.strip_suffix(after.as_str()))
                .filter(|p| !p.is_empty()),
            None => (id == self.before).then_some(""),
        }
    }
}

/// A row's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RowState {
    /// Under 80 % of the limit, or no known limit.
    Ok,
    /// 80 % of the limit or more.
    Near,
    /// At or over the limit: further units are refused (or held).
    Exceeded,
    /// Over the limit of a shadow policy: it would refuse, but lets through.
    Shadow,
}

/// One overview row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The metering id (partner text: shown as text only).
    pub metering_id: String,
    /// The partner part of the id.
    pub partner: String,
    /// The route part of the id (the gateway route, or what precedes the first `:`).
    pub route: String,
    /// Units used in the current window.
    pub used: u64,
    /// The limit in force, when known.
    pub limit: Option<u64>,
    /// Whose limit it is: `route`, `policy` (or `request`), when known.
    pub limit_source: Option<LimitSource>,
    /// Seconds until the window resets (`None` for rolling windows).
    pub resets_in_s: Option<i64>,
    /// Refusals in the current window.
    pub refused: u64,
    /// ok, near, exceeded or shadow.
    pub state: RowState,
    /// The window's length in seconds (a day counts 86,400 s), for drain times.
    pub window_s: u64,
    /// Items of this id the gateway holds.
    pub held: u64,
    /// Their units.
    pub held_units: u64,
    /// Since when some are held.
    pub held_since: Option<Timestamp>,
    /// Items delivered and still kept (until the dedup window prunes them).
    pub delivered: u64,
    /// Duplicates kept.
    pub duplicate: u64,
    /// Rejected items kept.
    pub rejected: u64,
}

/// What to sort by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SortKey {
    /// The metering id.
    #[default]
    Id,
    /// The partner, then the id.
    Partner,
    /// The route, then the id.
    Route,
    /// Share of the limit used.
    Percent,
    /// The state (exceeded first when descending).
    State,
    /// Time until reset.
    Reset,
    /// Units held by the gateway.
    Held,
}

/// `?page=&per_page=&sort=&desc=&partner=&route=&state=`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct OverviewQuery {
    /// 1-based page number.
    pub page: Option<usize>,
    /// Rows per page, 1 to 500.
    pub per_page: Option<usize>,
    /// Sort key.
    #[serde(default)]
    pub sort: SortKey,
    /// Descending order.
    #[serde(default)]
    pub desc: bool,
    /// Keeps partners containing this text (case-insensitive).
    pub partner: Option<String>,
    /// Keeps this route only.
    pub route: Option<String>,
    /// Keeps this state only.
    pub state: Option<RowState>,
}

impl OverviewQuery {
    /// A prefix every metering id of the route filtered on starts with (empty without a route
    /// filter), so the counters read for the page are those that may be listed: an id of
    /// `routes`' route of that name starts with its template's text before `{partner}`, and an
    /// id of no route has its route before the first `:`.
    pub fn id_prefix(&self, routes: &[RouteLimit]) -> String {
        let Some(route) = self.route.as_deref().filter(|r| !r.is_empty()) else {
            return String::new();
        };
        let mut prefix = format!("{route}:");
        for r in routes.iter().filter(|r| r.name == route) {
            let before = Template::of(r).before;
            let common = prefix.bytes().zip(before.bytes()).take_while(|(a, b)| a == b).count();
            // Both are whole strings up to `common`, which ends on a char boundary of each.
            prefix = prefix.get(..common).unwrap_or_default().to_owned();
        }
        prefix
    }
}

/// One page of rows, and what the filters left in total.
#[derive(Debug, Clone, Serialize)]
pub struct OverviewPage {
    /// Rows matching the filters, on every page.
    pub total: usize,
    /// This page (1-based).
    pub page: usize,
    /// How many pages there are (at least 1).
    pub pages: usize,
    /// Rows per page.
    pub per_page: usize,
    /// Every route seen, for the filter's choices.
    pub routes: Vec<String>,
    /// This page's rows.
    pub rows: Vec<Row>,
    /// Set to the number of counters read when the store holds more than a view reads
    /// ([`crate::MAX_COUNTERS`]): the rows are made from the first of them by metering id.
    pub partial: Option<usize>,
}

fn share(r: &Row) -> u64 {
    match r.limit {
        Some(0) => u64::MAX,
        Some(l) => r.used.saturating_mul(100) / l,
        None => 0,
    }
}

/// The queue's counts of one metering id, summed over its groups.
#[derive(Debug, Clone, Copy, Default)]
struct Queued {
    counts: StateCounts,
}

impl Queued {
    fn add(&mut self, c: &StateCounts) {
        for i in 0..c.items.len() {
            self.counts.items[i] += c.items[i];
            self.counts.units[i] = self.counts.units[i].saturating_add(c.units[i]);
        }
        self.counts.held_since = match (self.counts.held_since, c.held_since) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// A counter with nothing used, for an id the queue knows but the store has no counter of
/// (its window ended with items still held).
fn idle_counter(id: MeteringId) -> CounterInfo {
    CounterInfo {
        identifier: id,
        interval: 1,
        unit: TimeUnit::Hour,
        window: WindowKind::Calendar,
        start: None,
        used: 0,
        exceed_count: 0,
        total_exceed_count: 0,
        window_start: None,
        window_end: None,
    }
}

/// Builds the row of one counter.
fn row(
    c: &CounterInfo,
    q: &Queued,
    policies: &PolicySet,
    routes: &[Template<'_>],
    now: Timestamp,
) -> Row {
    let id = c.identifier.as_str();
    let policy = policies.find(id);
    let route = routes.iter().find_map(|t| t.partner_of(id).map(|p| (t.route, p)));
    let (route_name, partner) = match route {
        Some((r, p)) => (r.name.clone(), p.to_owned()),
        None => match id.split_once(':') {
            Some((a, b)) => (a.to_owned(), b.to_owned()),
            None => (String::new(), id.to_owned()),
        },
    };
    // What the route asks (or, for an id of no route, the counter's window with no limit),
    // completed by the policies as the deciding face completes it.
    let (asked, asker) = match route {
        Some((r, _)) => (
            Asked {
                limit: Some(r.limit),
                interval: Some(r.interval),
                unit: Some(r.unit),
                ..Asked::default()
            },
            LimitSource::Route,
        ),
        None => (
            Asked {
                limit: None,
                interval: Some(c.interval),
                unit: Some(c.unit),
                window: Some(c.window),
                start: c.start,
            },
            LimitSource::Request,
        ),
    };
    let resolved = policies.resolve(&c.identifier, &asked, asker).ok();
    let limit = resolved.as_ref().map(|r| r.spec.limit);
    let limit_source = resolved.as_ref().map(|r| r.source);
    let shadow = policy.is_some_and(|p| p.mode == PolicyMode::Shadow);
    let state = match limit {
        Some(l) if c.used > l && shadow => RowState::Shadow,
        Some(l) if c.used >= l && !shadow => RowState::Exceeded,
        Some(l) if c.used.saturating_mul(100) >= l.saturating_mul(NEAR_PERCENT) => RowState::Near,
        _ => RowState::Ok,
    };
    let resets_in_s = c.window_end.map(|end| end.as_second().saturating_sub(now.as_second()));
    // A month counts 30 days: the drain time is an estimate.
    let seconds = |interval: u32, unit: TimeUnit| {
        u64::from(interval) * unit.fixed_seconds().map_or(30 * 86_400, |s| s.unsigned_abs())
    };
    let window_s = resolved
        .as_ref()
        .map_or(seconds(c.interval, c.unit), |r| seconds(r.spec.interval, r.spec.unit));
    let q = &q.counts;
    Row {
        metering_id: id.to_owned(),
        partner,
        route: route_name,
        used: c.used,
        limit,
        limit_source,
        resets_in_s,
        refused: c.exceed_count,
        state,
        window_s,
        held: q.items_in(State::Held),
        held_units: q.units_in(State::Held),
        held_since: q.held_since.and_then(|ms| Timestamp::from_millisecond(ms).ok()),
        delivered: q.items_in(State::Delivered),
        duplicate: q.items_in(State::Duplicate),
        rejected: q.items_in(State::Rejected),
    }
}

/// What an overview is made of: the store's counters, the policies, the gateway's routes and
/// its queue's tally (empty without a gateway).
#[derive(Clone, Copy)]
pub struct Sources<'a> {
    /// The store's counters.
    pub counters: &'a [CounterInfo],
    /// The policies in force.
    pub policies: &'a PolicySet,
    /// The gateway's routes.
    pub routes: &'a [RouteLimit],
    /// The gateway queue's tally.
    pub queue: &'a [(TallyKey, StateCounts)],
}

/// Every row, one per metering id, unfiltered and unsorted. Several counters of one id
/// (different window shapes) show as the most used one; an id with queued items but no
/// counter shows with nothing used.
pub(crate) fn rows(src: Sources<'_>, now: Timestamp) -> Vec<Row> {
    let Sources { counters, policies, routes, queue } = src;
    let mut queued: HashMap<&str, Queued> = HashMap::new();
    for (k, c) in queue {
        if let Some(m) = &k.metering_id {
            queued.entry(m.as_str()).or_default().add(c);
        }
    }
    let counted: std::collections::HashSet<&str> =
        counters.iter().map(|c| c.identifier.as_str()).collect();
    let idle: Vec<CounterInfo> = queued
        .keys()
        .filter(|id| !counted.contains(**id))
        .filter_map(|id| MeteringId::new(id).ok().map(idle_counter))
        .collect();
    let mut by_id: HashMap<&str, &CounterInfo> = HashMap::with_capacity(counters.len());
    for c in counters.iter().chain(&idle) {
        let e = by_id.entry(c.identifier.as_str()).or_insert(c);
        if c.used > e.used {
            *e = c;
        }
    }
    let templates: Vec<Template<'_>> = routes.iter().map(Template::of).collect();
    let none = Queued::default();
    by_id
        .into_values()
        .map(|c| {
            let held = queued.get(c.identifier.as_str()).unwrap_or(&none);
            row(c, held, policies, &templates, now)
        })
        .collect()
}

/// The overview page `q` asks for: every row (see `rows`), filtered, sorted and cut.
pub fn overview(src: Sources<'_>, now: Timestamp, q: &OverviewQuery) -> OverviewPage {
    let partner = q.partner.as_deref().map(str::to_lowercase).filter(|p| !p.is_empty());
    let route = q.route.as_deref().filter(|r| !r.is_empty());
    let mut route_names: std::collections::BTreeSet<String> =
        src.routes.iter().map(|r| r.name.clone()).collect();
    let mut rows = rows(src, now);
    for r in &rows {
        if route_names.len() < 1000 && !route_names.contains(&r.route) {
            route_names.insert(r.route.clone());
        }
    }
    rows.retain(|r| {
        partner.as_ref().is_none_or(|p| r.partner.to_lowercase().contains(p))
            && route.is_none_or(|x| r.route == x)
            && q.state.is_none_or(|s| r.state == s)
    });
    let by_id = |a: &Row, b: &Row| a.metering_id.cmp(&b.metering_id);
    let order: fn(&Row, &Row) -> Ordering = match q.sort {
        SortKey::Id => |a, b| a.metering_id.cmp(&b.metering_id),
        SortKey::Partner => |a, b| a.partner.cmp(&b.partner),
        SortKey::Route => |a, b| a.route.cmp(&b.route),
        SortKey::Percent => |a, b| share(a).cmp(&share(b)),
        SortKey::State => |a, b| a.state.cmp(&b.state),
        SortKey::Reset => |a, b| a.resets_in_s.cmp(&b.resets_in_s),
        SortKey::Held => |a, b| a.held_units.cmp(&b.held_units),
    };
    rows.sort_unstable_by(|a, b| {
        let o = order(a, b).then_with(|| by_id(a, b));
        if q.desc { o.reverse() } else { o }
    });
    let per_page = q.per_page.unwrap_or(DEFAULT_PER_PAGE).clamp(1, MAX_PER_PAGE);
    let total = rows.len();
    let pages = total.div_ceil(per_page).max(1);
    let page = q.page.unwrap_or(1).clamp(1, pages);
    let rows: Vec<Row> = rows.into_iter().skip((page - 1) * per_page).take(per_page).collect();
    let routes = route_names.into_iter().collect();
    OverviewPage { total, page, pages, per_page, routes, rows, partial: None }
}

#[cfg(test)]
mod tests;
