//! The HTTP port: Prometheus `/metrics`, `/healthz` (alive) and `/readyz` (doing its job).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Binds `listen` and serves until `shutdown`; fails at once if the port is taken.
pub(crate) async fn serve(
    listen: SocketAddr,
    registry: Registry,
    ready: impl Fn() -> bool + Send + Sync + 'static,
    shutdown: CancellationToken,
) -> anyhow::Result<JoinHandle<()>> {
    let registry = Arc::new(registry);
    let ready = Arc::new(ready);
    let app = Router::new()
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
