//! The backend of another Tributary's lookup API: a batch of keys is one
//! `BatchGet` to its endpoint (`tributary.v1.Lookup`), so one Tributary's tables
//! can serve another's joins. Unavailable, deadline and overload statuses are
//! retryable; a wrong table, key or token is not.

use async_trait::async_trait;
use serde_json::Value;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request};
use tributary_proto::grpc::v1::lookup_client::LookupClient;
use tributary_proto::grpc::v1::{self, BatchGetRequest};
use tributary_proto::grpc::{from_json, to_json};

use crate::config::TributaryBackendConfig;
use crate::remote::backend::{Backend, BackendError};

/// Reads rows through another instance's lookup API.
pub struct LookupApiBackend {
    client: LookupClient<Channel>,
    table: String,
    authorization: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
}

impl LookupApiBackend {
    /// A backend for `config.endpoint` (connected lazily, on the first call).
    pub fn new(config: &TributaryBackendConfig) -> Result<Self, BackendError> {
        let permanent =
            |what: &str, e: &dyn std::fmt::Display| BackendError::permanent(format!("{what}: {e}"));
        let mut endpoint = Endpoint::from_shared(config.endpoint.clone())
            .map_err(|e| permanent("endpoint", &e))?;
        if config.endpoint.starts_with("https://") {
            tributary_proto::crypto_provider::install();
            let mut tls = ClientTlsConfig::new();
            if let Some(ca) = &config.ca {
                let pem =
                    std::fs::read(ca).map_err(|e| permanent(&ca.display().to_string(), &e))?;
                tls = tls.ca_certificate(Certificate::from_pem(pem));
            }
            endpoint = endpoint.tls_config(tls).map_err(|e| permanent("tls", &e))?;
        }
        let authorization = config
            .token
            .as_ref()
            .map(|t| format!("Bearer {t}").parse())
            .transpose()
            .map_err(|e| permanent("token", &e))?;
        Ok(LookupApiBackend {
            client: LookupClient::new(endpoint.connect_lazy()),
            table: config.table.clone(),
            authorization,
        })
    }
}

#[async_trait]
impl Backend for LookupApiBackend {
    async fn fetch(&self, keys: &[Vec<Value>]) -> Result<Vec<Option<Value>>, BackendError> {
        let mut request = Request::new(BatchGetRequest {
            table: self.table.clone(),
            keys: keys
                .iter()
                .map(|k| from_json(&Value::Array(k.clone())))
                .collect(),
            min_position: None,
            as_of_us: None,
        });
        if let Some(authorization) = &self.authorization {
            request
                .metadata_mut()
                .insert("authorization", authorization.clone());
        }
        let answer = self
            .client
            .clone()
            .batch_get(request)
            .await
            .map_err(|status| {
                let message = format!(
                    "BatchGet {}: {:?}: {}",
                    self.table,
                    status.code(),
                    status.message()
                );
                match status.code() {
                    Code::Unavailable
                    | Code::DeadlineExceeded
                    | Code::ResourceExhausted
                    | Code::Aborted
                    | Code::Cancelled
                    | Code::Unknown => BackendError::transient(message),
                    _ => BackendError::permanent(message),
                }
            })?
            .into_inner();
        if answer.results.len() != keys.len() {
            return Err(BackendError::permanent(format!(
                "BatchGet {}: {} results for {} keys",
                self.table,
                answer.results.len(),
                keys.len()
            )));
        }
        answer
            .results
            .into_iter()
            .map(|result| row_of(&self.table, result))
            .collect()
    }
}

fn row_of(table: &str, result: v1::GetResponse) -> Result<Option<Value>, BackendError> {
    result
        .row
        .filter(|_| result.found)
        .map(|row| to_json(&row))
        .transpose()
        .map_err(|e| BackendError::permanent(format!("BatchGet {table}: a row is not JSON: {e}")))
}
