//! What the pipeline task acts on: received files, delivery results, operators' requests and
//! units given back, all through one channel, so the task is the only writer of item state.

use tokio::sync::oneshot;
use tollgate_quota::MeteringId;

use crate::delivery::Attempt;
use crate::item::Item;
use crate::spool::FileRecord;

/// What the admin API may ask of the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AdminOp {
    /// Re-meter now (held or dead items).
    Retry,
    /// Deliver without metering.
    Release,
    /// Remove from the queue and the spool.
    Purge,
}

/// Why an admin operation was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AdminError {
    /// No item with that id.
    NotFound,
    /// The item's state does not allow the operation; the text says why.
    Conflict(String),
    /// The item's delivery attempt is under way: its outcome decides what is possible.
    InFlight(String),
    /// The spool failed.
    Spool(String),
}

/// Something for the pipeline to act on.
pub(crate) enum Event {
    /// Files made durable by inbound or upload.
    Received(Vec<FileRecord>),
    /// The result of one delivery attempt.
    Delivery {
        /// Item id.
        id: String,
        /// What happened.
        attempt: Attempt,
    },
    /// An operator request; the answer is the item after the operation (`None` when purged).
    Admin {
        /// Item id.
        id: String,
        /// The operation.
        op: AdminOp,
        /// For a bulk job or the upkeep: act only if the item, as it is when the operation
        /// runs, still passes this filter (another operator may have released it since the
        /// page was read).
        only_if: Option<std::sync::Arc<crate::filter::QueueFilter>>,
        /// Where the answer goes.
        reply: oneshot::Sender<Result<Option<Item>, AdminError>>,
    },
    /// Units of an undelivered interchange were given back to `metering_id`: the head of its
    /// held group may fit now.
    GivenBack {
        /// Whose units.
        metering_id: MeteringId,
    },
}
