//! How long a call may take: the server's bound, or the client's `grpc-timeout` when that is
//! shorter. A call still running at its deadline is dropped and answered `CANCELLED`
//! ("Timeout expired"), as gRPC servers do.
//!
//! The layer fails the call with tonic's [`TimeoutExpired`]; tonic's `RecoverError` layer
//! outside it turns that into the `CANCELLED` answer.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::TimeoutExpired;
use tonic::codegen::http::{HeaderMap, Request};

/// The header a gRPC client states its deadline in.
const GRPC_TIMEOUT: &str = "grpc-timeout";

/// Bounds every call by `bound` and the client's `grpc-timeout`, whichever ends first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeadlineLayer {
    pub(crate) bound: Duration,
}

impl<S> tower::Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Deadline { inner, bound: self.bound }
    }
}

/// See [`DeadlineLayer`].
#[derive(Debug, Clone)]
pub(crate) struct Deadline<S> {
    inner: S,
    bound: Duration,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B> tower::Service<Request<B>> for Deadline<S>
where
    S: tower::Service<Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let limit = client_timeout(req.headers()).map_or(self.bound, |t| t.min(self.bound));
        let answer = self.inner.call(req);
        Box::pin(async move {
            match tokio::time::timeout(limit, answer).await {
                Ok(answered) => answered.map_err(Into::into),
                Err(_) => Err(TimeoutExpired(()).into()),
            }
        })
    }
}

/// The client's `grpc-timeout` (1 to 8 digits and a unit: `H`, `M`, `S`, `m`, `u` or `n`);
/// `None` when absent or malformed, which leaves the server's bound alone.
fn client_timeout(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(GRPC_TIMEOUT)?.as_bytes();
    let (&unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::time::Instant;
    use tonic::codegen::http::{HeaderValue, Response};
    use tower::{ServiceBuilder, ServiceExt};

    /// A call that never answers, behind the layers the server puts around calls.
    async fn stuck_call(bound: Duration, header: Option<&str>) -> (Response<()>, Duration) {
        let stuck = tower::service_fn(|_: Request<()>| {
            std::future::pending::<Result<Response<tonic::body::Body>, Infallible>>()
        });
        let svc = ServiceBuilder::new()
            .layer(tonic::service::RecoverErrorLayer::new())
            .layer(DeadlineLayer { bound })
            .service(stuck);
        let mut req = Request::new(());
        if let Some(value) = header {
            req.headers_mut().insert(GRPC_TIMEOUT, HeaderValue::from_str(value).unwrap());
        }
        let started = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(5), svc.oneshot(req));
        let answer = answer.await.expect("answered within 5 s").expect("an answer, not an error");
        (answer.map(|_| ()), started.elapsed())
    }

    #[tokio::test]
    async fn a_call_past_the_clients_deadline_is_answered_cancelled() {
        let (answer, took) = stuck_call(Duration::from_secs(60), Some("100m")).await;
        assert_eq!(answer.headers()["grpc-status"], "1", "{answer:?}");
        assert_eq!(answer.headers()["grpc-message"], "Timeout%20expired");
        assert!(took >= Duration::from_millis(100), "{took:?}");
    }

    #[tokio::test]
    async fn the_servers_bound_cuts_a_longer_client_deadline() {
        for header in [None, Some("10S"), Some("bogus")] {
            let (answer, took) = stuck_call(Duration::from_millis(100), header).await;
            assert_eq!(answer.headers()["grpc-status"], "1", "{header:?}: {answer:?}");
            assert!(took >= Duration::from_millis(100), "{header:?}: {took:?}");
        }
    }

    fn with(value: &str) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        headers.insert(GRPC_TIMEOUT, HeaderValue::from_str(value).unwrap());
        client_timeout(&headers)
    }

    #[test]
    fn grpc_timeout_is_read_in_every_unit() {
        assert_eq!(with("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(with("3M"), Some(Duration::from_secs(180)));
        assert_eq!(with("20S"), Some(Duration::from_secs(20)));
        assert_eq!(with("250m"), Some(Duration::from_millis(250)));
        assert_eq!(with("99999999u"), Some(Duration::from_micros(99_999_999)));
        assert_eq!(with("7n"), Some(Duration::from_nanos(7)));
        assert_eq!(client_timeout(&HeaderMap::new()), None);
    }

    #[test]
    fn a_malformed_grpc_timeout_is_ignored() {
        for bad in ["", "m", "100", "123456789m", "10x", "-5S", "1.5S", "10 m"] {
            assert_eq!(with(bad), None, "{bad:?}");
        }
    }
}
