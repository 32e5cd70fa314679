//! What a remote table calls: a [`Backend`] answers a batch of keys in one call.

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
}

impl BackendError {
    /// A failure worth retrying.
    pub fn transient(message: impl Into<String>) -> Self {
        BackendError {
            retryable: true,
            message: message.into(),
        }
    }

    /// A failure retrying cannot fix.
    pub fn permanent(message: impl Into<String>) -> Self {
        BackendError {
            retryable: false,
            message: message.into(),
        }
    }
}

/// A store rows are read from by key.
#[async_trait]
pub trait Backend: Send + Sync {
    /// The rows of `keys` (each the key's values in key-column order), in the
    /// same order; `None` where there is no row.
    async fn fetch(&self, keys: &[Vec<Value>]) -> Result<Vec<Option<Value>>, BackendError>;
}
