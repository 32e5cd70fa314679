//! The HTTP port: Prometheus `/metrics`, `/healthz` (alive), `/readyz` (doing its
//! job), `/status` (Burrow-style evaluation, JSON) and `/` (the status page).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::status::{StatusBoard, now_ms};

/// Binds `listen` and serves until `shutdown`; fails at once if the port is taken.
pub(crate) async fn serve(
    listen: SocketAddr,
    registry: Registry,
    ready: impl Fn() -> bool + Send + Sync + 'static,
    status: Arc<StatusBoard>,
    shutdown: CancellationToken,
) -> anyhow::Result<JoinHandle<()>> {
    let registry = Arc::new(registry);
    let ready = Arc::new(ready);
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
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    if ready() {
                        (StatusCode::OK, "ready")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                    }
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("metrics.listen {listen}: {e}"))?;
    Ok(tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await
            .ok();
    }))
}
