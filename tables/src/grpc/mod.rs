//! The gRPC lookup API (`tributary.v1.Lookup`, see `proto/tributary/v1/lookup.proto`)
//! over an instance's local and remote tables.
//!
//! - `call`: deadlines, the concurrency limit, bearer tokens.
//! - `position`: read-your-position waits.
//! - `routing`: who holds which partition, and forwarding to them.
//! - `service`: the requests themselves.
//!
//! Besides the lookup service the server answers the standard `grpc.health.v1`
//! health service (`SERVING` once every held partition has caught up) and
//! server reflection (`grpc.reflection.v1`), both without a token.

mod call;
mod position;
mod routing;
mod service;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, ClientTlsConfig, Identity, Server, ServerTlsConfig};
use tonic_health::ServingStatus;
use tracing::info;
use tributary_proto::grpc::served::v1_served::lookup_server::LookupServer;
use tributary_proto::grpc::{FILE_DESCRIPTOR_SET, SERVICE_NAME};

use crate::config::grpc::GrpcConfig;
use crate::config::{TableMode, TablesConfig};
use crate::error::TableError;
use crate::grpc::call::{Admission, BearerToken};
use crate::grpc::routing::Routing;
use crate::grpc::service::{Limits, LookupService};
use crate::local_table::LocalTable;
use crate::metrics::TablesMetrics;
use crate::progress::Progress;
use crate::remote::RemoteTable;

/// The tables an instance serves.
pub struct ServedTables {
    /// Local tables, with the progress of their partitions.
    pub local: Vec<Arc<LocalTable>>,
    /// Their progress (`None` without local tables).
    pub progress: Option<Arc<Progress>>,
    /// Remote tables.
    pub remote: Vec<Arc<RemoteTable>>,
}

/// A running lookup server.
pub struct LookupApi {
    /// Where it listens (the bound port when the config said port 0).
    pub local_addr: SocketAddr,
    /// The server, its health reporter and the routing tasks.
    tasks: JoinSet<Result<(), TableError>>,
}

impl LookupApi {
    /// Waits, after shutdown, for the server and every task it started to stop
    /// (the routing publisher's goodbye record is written by then).
    pub async fn join(mut self) -> Result<(), TableError> {
        let mut first_error = None;
        while let Some(done) = self.tasks.join_next().await {
            let result =
                done.unwrap_or_else(|e| Err(TableError::Api(format!("a task failed: {e}"))));
            if let Err(e) = result {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Starts the lookup API of `config.grpc` over `tables`, until `shutdown`.
pub async fn start(
    config: &TablesConfig,
    grpc: &GrpcConfig,
    tables: ServedTables,
    metrics: TablesMetrics,
    shutdown: CancellationToken,
) -> Result<LookupApi, TableError> {
    let tls = grpc.tls.as_ref().map(tls_config).transpose()?;
    let mut tasks = JoinSet::new();
    let partitioned: Vec<String> = config
        .tables
        .iter()
        .filter(|t| t.mode == TableMode::Partitioned)
        .map(|t| t.name.clone())
        .collect();
    let routing = match (
        &tables.progress,
        grpc.routing.enabled && !partitioned.is_empty(),
    ) {
        (Some(progress), true) => Some(
            Routing::start(
                grpc,
                &config.kafka,
                &config.group_id,
                tls.as_ref().map(|(_, client)| client.clone()),
                progress.clone(),
                partitioned,
                shutdown.clone(),
                &mut tasks,
            )
            .await?,
        ),
        _ => None,
    };
    let service = LookupService::new(
        &tables.local,
        &tables.remote,
        tables.progress.clone(),
        routing,
        Limits {
            max_batch_keys: grpc.max_batch_keys,
            max_scan_rows: grpc.max_scan_rows,
        },
        Admission::new(
            grpc.max_concurrent_requests,
            Duration::from_millis(grpc.deadline_ms),
        ),
        metrics,
    );
    let lookup = LookupServer::new(service)
        .max_decoding_message_size(grpc.max_message_bytes)
        .max_encoding_message_size(grpc.max_message_bytes);
    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, false).await;
    tasks.spawn(report_health(health, tables.progress, shutdown.clone()));
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| TableError::Api(format!("reflection: {e}")))?;

    let listener = tokio::net::TcpListener::bind(grpc.listen)
        .await
        .map_err(|e| {
            TableError::Api(format!(
                "cannot listen on {} (grpc.listen): {e}",
                grpc.listen
            ))
        })?;
    let local_addr = listener
        .local_addr()
        .map_err(|e| TableError::Api(format!("grpc.listen: {e}")))?;
    let mut server = Server::builder();
    if let Some((server_tls, _)) = tls {
        server = server
            .tls_config(server_tls)
            .map_err(|e| TableError::Api(format!("grpc.tls: {e}")))?;
    }
    let router = server.add_service(health_service).add_service(reflection);
    // Without a token, no interceptor: it would turn every request's headers
    // into metadata and back for nothing.
    let router = match grpc.token.as_deref() {
        Some(token) => router.add_service(InterceptedService::new(
            lookup,
            BearerToken::new(Some(token)),
        )),
        None => router.add_service(lookup),
    };
    info!(%local_addr, advertise = %grpc.advertised(), tls = grpc.tls.is_some(), token = grpc.token.is_some(), "lookup API listening");
    // No Nagle: a response of several segments would otherwise wait for the
    // client's delayed ACK (~40 ms).
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let serve = router.serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned());
    tasks.spawn(async move {
        serve
            .await
            .map_err(|e| TableError::Api(format!("server: {e}")))
    });
    Ok(LookupApi { local_addr, tasks })
}

/// `SERVING` while every held partition has caught up (remote-only: always).
async fn report_health(
    health: tonic_health::server::HealthReporter,
    progress: Option<Arc<Progress>>,
    shutdown: CancellationToken,
) -> Result<(), TableError> {
    let mut last = false;
    loop {
        let serving = progress.as_ref().is_none_or(|p| p.serving());
        if serving != last {
            set_health(&health, serving).await;
            last = serving;
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

async fn set_health(health: &tonic_health::server::HealthReporter, serving: bool) {
    let status = if serving {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    for name in ["", SERVICE_NAME] {
        health.set_service_status(name, status).await;
    }
}

/// The server's TLS settings and the client settings forwarding uses.
fn tls_config(
    tls: &crate::config::grpc::TlsConfig,
) -> Result<(ServerTlsConfig, ClientTlsConfig), TableError> {
    tributary_proto::crypto_provider::install();
    let read = |path: &std::path::PathBuf, field: &str| {
        std::fs::read(path).map_err(|e| {
            TableError::Api(format!(
                "grpc.tls.{field}: cannot read {}: {e}",
                path.display()
            ))
        })
    };
    let identity = Identity::from_pem(read(&tls.cert, "cert")?, read(&tls.key, "key")?);
    let mut server = ServerTlsConfig::new().identity(identity.clone());
    if let Some(ca) = &tls.client_ca {
        server = server.client_ca_root(Certificate::from_pem(read(ca, "client_ca")?));
    }
    let mut client = ClientTlsConfig::new().identity(identity);
    if let Some(ca) = tls.peer_ca() {
        client = client.ca_certificate(Certificate::from_pem(read(ca, "peer_ca")?));
    }
    Ok((server, client))
}
