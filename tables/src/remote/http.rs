//! The HTTP JSON backend: one `GET` per key, at a URL made from a template
//! (`http://catalog/products/{sku}`: each `{column}` is replaced by the key's
//! value, percent-encoded). 200 with a JSON object is the row, 404 is no row;
//! 5xx, 429 and connection errors are retryable, other statuses are not; 429
//! and 503 are overload (the rate limit backs off, and waits out a
//! `Retry-After` of seconds or an HTTP date). The keys of a batch are fetched
//! concurrently over a keep-alive connection pool; each is a request the rate
//! limit counts.

use async_trait::async_trait;
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper::{StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::config::HttpBackendConfig;
use crate::remote::backend::{Backend, BackendError, Overload};

/// Reads rows from an HTTP service.
pub struct HttpBackend {
    client: Client<HttpConnector, Empty<Bytes>>,
    template: String,
    key_columns: Vec<String>,
}

impl HttpBackend {
    /// A backend for `config.url` (a template naming every key column).
    pub fn new(config: &HttpBackendConfig) -> Self {
        HttpBackend {
            client: Client::builder(TokioExecutor::new()).build_http(),
            template: config.url.clone(),
            key_columns: config.key.clone(),
        }
    }

    fn url(&self, key: &[Value]) -> Result<Uri, BackendError> {
        let mut url = self.template.clone();
        for (column, value) in self.key_columns.iter().zip(key) {
            let text = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            url = url.replace(&format!("{{{column}}}"), &percent_encode(&text));
        }
        url.parse()
            .map_err(|e| BackendError::permanent(format!("url {url:?}: {e}")))
    }

    async fn get(&self, key: &[Value]) -> Result<Option<Value>, BackendError> {
        let url = self.url(key)?;
        let response = self
            .client
            .get(url.clone())
            .await
            .map_err(|e| BackendError::transient(format!("GET {url}: {e}")))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(hyper::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(retry_after);
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| BackendError::transient(format!("GET {url}: reading the body: {e}")))?
            .to_bytes();
        match status {
            StatusCode::OK => match serde_json::from_slice(&body) {
                Ok(row @ Value::Object(_)) => Ok(Some(row)),
                Ok(_) => Err(BackendError::permanent(format!(
                    "GET {url}: the body is not a JSON object"
                ))),
                Err(e) => Err(BackendError::permanent(format!(
                    "GET {url}: the body is not JSON: {e}"
                ))),
            },
            StatusCode::NOT_FOUND => Ok(None),
            s @ (StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE) => {
                let reason = if s == StatusCode::TOO_MANY_REQUESTS {
                    "http_429"
                } else {
                    "http_503"
                };
                let overload = Overload {
                    reason,
                    retry_after,
                };
                Err(BackendError::overloaded(
                    format!("GET {url}: {s}"),
                    overload,
                ))
            }
            s if s.is_server_error() => Err(BackendError::transient(format!("GET {url}: {s}"))),
            s => Err(BackendError::permanent(format!("GET {url}: {s}"))),
        }
    }
}

/// A `Retry-After` value: seconds, or an HTTP date (the wait until then).
fn retry_after(value: &str) -> Option<std::time::Duration> {
    if let Ok(seconds) = value.trim().parse::<u64>() {
        return Some(std::time::Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value.trim()).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[async_trait]
impl Backend for HttpBackend {
    async fn fetch(&self, keys: &[Vec<Value>]) -> Result<Vec<Option<Value>>, BackendError> {
        futures::future::try_join_all(keys.iter().map(|k| self.get(k))).await
    }

    /// One `GET` per key.
    fn requests(&self, keys: usize) -> usize {
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_come_from_the_template_with_encoded_values() {
        let b = HttpBackend::new(&HttpBackendConfig {
            url: "http://svc/products/{sku}?region={region}".into(),
            key: vec!["sku".into(), "region".into()],
        });
        let url = b
            .url(&[Value::from("A B/1"), Value::from(7)])
            .unwrap()
            .to_string();
        assert_eq!(url, "http://svc/products/A%20B%2F1?region=7");
    }

    #[test]
    fn retry_after_is_seconds_or_a_date() {
        assert_eq!(retry_after("3"), Some(std::time::Duration::from_secs(3)));
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
        let wait = retry_after(&httpdate::fmt_http_date(later)).unwrap();
        assert!(wait > std::time::Duration::from_secs(58), "{wait:?}");
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(std::time::Duration::ZERO),
            "a date past"
        );
        assert_eq!(retry_after("soon"), None);
    }
}
