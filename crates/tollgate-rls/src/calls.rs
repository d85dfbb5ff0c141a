//! The calls of one HTTP/2 connection, run inside the connection's own task.
//!
//! hyper's HTTP/2 server hands every call (stream) to an executor. With tokio's, each call is
//! a task of its own: a spawn, a wake-up of an idle worker to steal it, and a hand-back to the
//! connection when the answer is ready. A rate limit check is a few microseconds of work, so
//! that traffic costs more than the check. [`Calls`] is the executor instead: it queues each
//! call for the connection's task, and [`Driven`] polls the connection and its calls together,
//! so a call is answered without leaving the task that read it. Connections still spread
//! over the runtime's workers as tasks of their own.
//!
//! # Invariants
//!
//! * **Every queued call is polled.** `Calls`' `execute` pushes the call and wakes the
//!   connection's task through the waker [`Driven::poll`] registered before taking the queue,
//!   so a call queued at any point, even during that poll, brings another poll. A poll takes
//!   the calls queued while it ran for a few rounds itself, then yields, so a connection
//!   flooding calls cannot hold a worker.
//! * **The task ends when the connection has ended and every call has finished**, never
//!   before: a call still answering keeps it alive (each call is bounded by the call timeout).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use futures_util::stream::{FuturesUnordered, StreamExt};

type Call = Pin<Box<dyn Future<Output = ()> + Send>>;

/// How often one poll takes newly queued calls before it yields to the runtime's other tasks.
const ROUNDS_PER_POLL: usize = 8;

/// The executor of one connection's calls (see the module docs).
#[derive(Clone, Default)]
pub(crate) struct Calls(Arc<Mutex<Queue>>);

#[derive(Default)]
struct Queue {
    new: Vec<Call>,
    waker: Option<Waker>,
}

impl Calls {
    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        // Pushing and taking are single operations: a poisoned queue is still whole.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<F> hyper::rt::Executor<F> for Calls
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, call: F) {
        let waker = {
            let mut queue = self.queue();
            queue.new.push(Box::pin(call));
            queue.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// A connection future and the calls it queued on its [`Calls`], polled as one task.
pub(crate) struct Driven<C> {
    conn: Pin<Box<C>>,
    conn_done: bool,
    calls: Calls,
    running: FuturesUnordered<Call>,
}

impl<C, E> Driven<C>
where
    C: Future<Output = Result<(), E>>,
{
    /// `conn`, whose server was built with `calls` as its executor.
    pub(crate) fn new(conn: C, calls: Calls) -> Self {
        Self { conn: Box::pin(conn), conn_done: false, calls, running: FuturesUnordered::new() }
    }
}

impl<C, E> Future for Driven<C>
where
    C: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        for _ in 0..ROUNDS_PER_POLL {
            {
                let mut queue = this.calls.queue();
                if !queue.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    queue.waker = Some(cx.waker().clone());
                }
                this.running.extend(queue.new.drain(..));
            }
            while let Poll::Ready(Some(())) = this.running.poll_next_unpin(cx) {}
            if !this.conn_done
                && let Poll::Ready(ended) = this.conn.as_mut().poll(cx)
            {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "grpc connection ended");
                }
                this.conn_done = true;
            }
            if !this.calls.queue().new.is_empty() {
                continue;
            }
            if this.conn_done && this.running.is_empty() {
                return Poll::Ready(());
            }
            return Poll::Pending;
        }
        // Calls keep arriving: their queueing has already woken this task, so the runtime
        // polls it again after the other tasks have had their turn.
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn the_task_ends_after_the_connection_and_every_call() {
        let calls = Calls::default();
        let ran = Arc::new(AtomicUsize::new(0));
        let (release, held) = tokio::sync::oneshot::channel::<()>();
        let (exec, counted) = (calls.clone(), Arc::clone(&ran));
        // A connection that queues three calls, the first held until released, then ends.
        let conn = async move {
            let mut held = Some(held);
            for _ in 0..3 {
                let (held, counted) = (held.take(), Arc::clone(&counted));
                exec.execute(async move {
                    if let Some(held) = held {
                        let _ = held.await;
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                });
                tokio::task::yield_now().await;
            }
            Ok::<(), std::convert::Infallible>(())
        };
        let task = tokio::spawn(Driven::new(conn, calls));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(ran.load(Ordering::SeqCst), 2, "the two free calls ran");
        assert!(!task.is_finished(), "a call is still running");
        release.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), task).await.unwrap().unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 3);
    }
}
