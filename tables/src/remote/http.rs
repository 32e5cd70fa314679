//! The HTTP JSON backend: one `GET` per key, at a URL made from a template
//! (`http://catalog/products/{sku}`: each `{column}` is replaced by the key's
//! value, percent-encoded). 200 with a JSON object is the row, 404 is no row;
//! 5xx, 429 and connection errors are retryable, other statuses are not. The
//! keys of a batch are fetched concurrently over a keep-alive connection pool.

use async_trait::async_trait;
use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use hyper::{StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::config::HttpBackendConfig;
use crate::remote::backend::{Backend, BackendError};

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
            s if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS => {
                Err(BackendError::transient(format!("GET {url}: {s}")))
            }
            s => Err(BackendError::permanent(format!("GET {url}: {s}"))),
        }
    }
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
}
