//! What every lookup request goes through first: its deadline (the client's
//! `grpc-timeout`, capped by `grpc.deadline_ms`), a slot under the concurrency
//! limit, bearer-token checks, and whether another instance forwarded it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tonic::metadata::{Ascii, MetadataMap, MetadataValue};
use tonic::{Request, Status};

/// Header set on requests one instance forwards to another: the receiver answers
/// from what it holds and never forwards again.
pub(crate) const FORWARDED: &str = "x-tributary-forwarded";

/// An admitted request.
pub(crate) struct Call {
    /// When the answer is due.
    pub(crate) deadline: Instant,
    /// Forwarded by another instance.
    pub(crate) forwarded: bool,
    _slot: OwnedSemaphorePermit,
}

/// The concurrency limit and the longest deadline.
pub(crate) struct Admission {
    slots: Arc<Semaphore>,
    limit: usize,
    max_deadline: Duration,
}

impl Admission {
    pub(crate) fn new(limit: usize, max_deadline: Duration) -> Self {
        Admission {
            slots: Arc::new(Semaphore::new(limit)),
            limit,
            max_deadline,
        }
    }

    /// Waits for a slot, until the request's deadline.
    pub(crate) async fn admit<T>(&self, request: &Request<T>) -> Result<Call, Status> {
        let timeout = client_timeout(request.metadata())
            .map_or(self.max_deadline, |t| t.min(self.max_deadline));
        // Answer a little before the client gives up, so it gets our reason
        // rather than its own "timeout expired".
        let margin = (timeout / 10).min(Duration::from_millis(50));
        let deadline = Instant::now() + timeout - margin;
        // A free slot is taken at once; only a wait needs a timer.
        let slot = match self.slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => tokio::time::timeout_at(deadline, self.slots.clone().acquire_owned())
                .await
                .map_err(|_| {
                    Status::resource_exhausted(format!(
                        "{} requests are in flight (grpc.max_concurrent_requests) and none finished before the deadline",
                        self.limit
                    ))
                })?
                .expect("the semaphore is never closed"),
        };
        Ok(Call {
            deadline,
            forwarded: request.metadata().contains_key(FORWARDED),
            _slot: slot,
        })
    }
}

/// The `grpc-timeout` a client sent: up to 8 digits and a unit (`H M S m u n`).
pub(crate) fn client_timeout(metadata: &MetadataMap) -> Option<Duration> {
    let text = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Awaits `work` until `deadline`; `DEADLINE_EXCEEDED` after it.
pub(crate) async fn within<T>(
    deadline: Instant,
    what: &str,
    work: impl Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    tokio::time::timeout_at(deadline, work)
        .await
        .unwrap_or_else(|_| {
            Err(Status::deadline_exceeded(format!(
                "{what}: the deadline passed"
            )))
        })
}

/// Checks `authorization: Bearer <token>` when a token is configured.
#[derive(Clone)]
pub(crate) struct BearerToken(Option<Arc<str>>);

impl BearerToken {
    pub(crate) fn new(token: Option<&str>) -> Self {
        BearerToken(token.map(Arc::from))
    }

    /// The header value that carries the token (for forwarded requests).
    pub(crate) fn header(&self) -> Option<MetadataValue<Ascii>> {
        self.0
            .as_ref()
            .and_then(|t| format!("Bearer {t}").parse().ok())
    }
}

impl tonic::service::Interceptor for BearerToken {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let Some(token) = &self.0 else {
            return Ok(request);
        };
        let presented = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match presented {
            Some(p) if constant_time_eq(p.as_bytes(), token.as_bytes()) => Ok(request),
            Some(_) => Err(Status::unauthenticated("the bearer token is wrong")),
            None => Err(Status::unauthenticated(
                "this server requires `authorization: Bearer <token>`",
            )),
        }
    }
}

/// Compares without stopping at the first difference (no timing hint about the token).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use tonic::service::Interceptor as _;

    use super::*;

    #[test]
    fn parses_grpc_timeouts() {
        let timeout = |v: &str| {
            let mut m = MetadataMap::new();
            m.insert("grpc-timeout", v.parse().unwrap());
            client_timeout(&m)
        };
        assert_eq!(timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(timeout("100u"), Some(Duration::from_micros(100)));
        assert_eq!(timeout("5x"), None);
        assert_eq!(timeout("m"), None);
        assert_eq!(client_timeout(&MetadataMap::new()), None);
    }

    #[tokio::test]
    async fn admits_up_to_the_limit_then_waits_until_the_deadline() {
        let admission = Admission::new(1, Duration::from_millis(50));
        let first = admission.admit(&Request::new(())).await.unwrap();
        assert!(!first.forwarded);
        let err = match admission.admit(&Request::new(())).await {
            Err(e) => e,
            Ok(_) => panic!("a second request gets no slot while the first holds it"),
        };
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        drop(first);
        let mut forwarded = Request::new(());
        forwarded
            .metadata_mut()
            .insert(FORWARDED, "1".parse().unwrap());
        assert!(admission.admit(&forwarded).await.unwrap().forwarded);
    }

    #[test]
    fn bearer_tokens() {
        let with = |header: Option<&str>| {
            let mut request = Request::new(());
            if let Some(h) = header {
                request
                    .metadata_mut()
                    .insert("authorization", h.parse().unwrap());
            }
            BearerToken::new(Some("s3cret")).call(request).map(|_| ())
        };
        assert!(with(Some("Bearer s3cret")).is_ok());
        assert_eq!(
            with(Some("Bearer s3creT")).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(with(None).unwrap_err().code(), tonic::Code::Unauthenticated);
        assert!(BearerToken::new(None).call(Request::new(())).is_ok());
        assert_eq!(
            BearerToken::new(Some("s3cret")).header().unwrap(),
            "Bearer s3cret"
        );
    }
}
