//! The HTTP port: Prometheus `/metrics`, `/healthz` (alive and not stuck),
//! `/readyz` (doing its job), `/status` (Burrow-style evaluation, JSON) and `/`
//! (the status page). Both probes fail while the status board's watchdog finds
//! an item stuck, so Kubernetes restarts a pipeline that silently stopped.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::status::{StatusBoard, now_ms};

/// Binds `listen` and serves until `shutdown`; fails at once if the port is taken.
/// Logs the address actually bound (`listen` may name port 0).
pub(crate) async fn serve(
    listen: SocketAddr,
    registry: Registry,
    ready: impl Fn() -> bool + Send + Sync + 'static,
    status: Arc<StatusBoard>,
    shutdown: CancellationToken,
) -> anyhow::Result<JoinHandle<()>> {
    let registry = Arc::new(registry);
    let ready = Arc::new(ready);
    let stuck = {
        let status = status.clone();
        move || {
            let stuck = status.stuck();
            (!stuck.is_empty()).then(|| {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("stuck: {}", stuck.join(", ")),
                )
            })
        }
    };
    let stuck_ready = stuck.clone();
    let app = Router::new()
        .route(
            "/",
            get(|| async { axum::response::Html(include_str!("status_page.html")) }),
        )
        .route(
            "/status",
            get(move || {
                let status = status.clone();
                async move { axum::Json(status.report(now_ms())) }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let registry = registry.clone();
                async move {
                    let mut body = String::new();
                    match prometheus_client::encoding::text::encode(&mut body, &registry) {
                        Ok(()) => (StatusCode::OK, body),
                        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
                    }
                }
            }),
        )
        .route(
            "/healthz",
            get(move || {
                let answer = stuck().unwrap_or((StatusCode::OK, "ok".to_owned()));
                async move { answer }
            }),
        )
        .route(
            "/readyz",
            get(move || {
                let answer = stuck_ready().unwrap_or_else(|| {
                    if ready() {
                        (StatusCode::OK, "ready".to_owned())
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready".to_owned())
                    }
                });
                async move { answer }
            }),
        );
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("metrics.listen {listen}: {e}"))?;
    let bound = listener.local_addr()?;
    info!(listen = %bound, "metrics and health endpoints up");
    Ok(tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await
            .ok();
    }))
}
