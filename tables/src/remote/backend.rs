//! What a remote table calls: a [`Backend`] answers a batch of keys in one call.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

/// A failed backend call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct BackendError {
    /// Whether trying again may succeed (connection lost, timeout), as opposed
    /// to a request that can never succeed (unknown column, bad SQL).
    pub retryable: bool,
    /// What went wrong.
    pub message: String,
    /// Whether the backend said it is overloaded (the rate limit backs off).
    pub overload: Option<Overload>,
}

/// A backend's sign that it has more work than it can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overload {
    /// Metric label: `http_429`, `http_503`, `mysql_too_many_connections`,
    /// `mysql_lock_wait_timeout`, `timeout`, …
    pub reason: &'static str,
    /// How long the backend asked callers to wait (HTTP `Retry-After`).
    pub retry_after: Option<Duration>,
}

impl BackendError {
    /// A failure worth retrying.
    pub fn transient(message: impl Into<String>) -> Self {
        BackendError {
            retryable: true,
            message: message.into(),
            overload: None,
        }
    }

    /// A failure worth retrying later, because the backend is overloaded.
    pub fn overloaded(message: impl Into<String>, overload: Overload) -> Self {
        BackendError {
            retryable: true,
            message: message.into(),
            overload: Some(overload),
        }
    }

    /// A failure retrying cannot fix.
    pub fn permanent(message: impl Into<String>) -> Self {
        BackendError {
            retryable: false,
            message: message.into(),
            overload: None,
        }
    }
}

/// A store rows are read from by key.
#[async_trait]
pub trait Backend: Send + Sync {
    /// The rows of `keys` (each the key's values in key-column order), in the
    /// same order; `None` where there is no row.
    async fn fetch(&self, keys: &[Vec<Value>]) -> Result<Vec<Option<Value>>, BackendError>;

    /// Requests the backend serves to fetch `keys` (what the rate limit
    /// counts): one statement or call per batch unless the backend says otherwise.
    fn requests(&self, _keys: usize) -> usize {
        1
    }
}
