//! Acting on every item a filter keeps, a page at a time, through the pipeline's own operator
//! events: the engine of bulk jobs and of the gateway's retention (`upkeep`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;

use super::PAGE;
use crate::filter::QueueFilter;
use crate::pipeline::{AdminError, AdminOp, Event};
use crate::spool::Spool;

/// How [`each_page`] ended.
pub(crate) enum Pages {
    /// No item of the filter is left.
    Done,
    /// `stop` was set.
    Stopped,
}

/// Sends `op` for every item `filter` keeps through the pipeline's events, a page of [`PAGE`]
/// at a time (one pipeline batch each), until none is left or `stop` is set; `tally(true)`
/// for each item acted on, `tally(false)` for one skipped (acted on first by someone else, or
/// being delivered). `Err` when the spool or the pipeline fails.
pub(crate) async fn each_page(
    spool: &Arc<Spool>,
    events: &UnboundedSender<Event>,
    filter: &QueueFilter,
    op: AdminOp,
    stop: &AtomicBool,
    mut tally: impl FnMut(bool),
) -> Result<Pages, String> {
    let mut cursor: Option<String> = None;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(Pages::Stopped);
        }
        let (spool, paged, after) = (spool.clone(), filter.clone(), cursor.clone());
        let page =
            tokio::task::spawn_blocking(move || spool.page(&paged, after.as_deref(), PAGE)).await;
        let (items, next) = page.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
        let mut replies = Vec::with_capacity(items.len());
        let only_if = Some(std::sync::Arc::new(filter.clone()));
        for item in &items {
            let (tx, rx) = oneshot::channel();
            let ev = Event::Admin { id: item.id.clone(), op, only_if: only_if.clone(), reply: tx };
            if events.send(ev).is_err() {
                return Err("the gateway is shutting down".into());
            }
            replies.push(rx);
        }
        let mut failure = None;
        for rx in replies {
            match rx.await {
                Ok(Ok(_)) => tally(true),
                Ok(Err(AdminError::Spool(e))) => failure = Some(e),
                Ok(Err(_)) => tally(false),
                Err(_) => failure = Some("the gateway is shutting down".into()),
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        match (next, items.last()) {
            (Some(_), Some(last)) => cursor = Some(last.id.clone()),
            _ => return Ok(Pages::Done),
        }
    }
}
