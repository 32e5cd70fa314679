//! Keeps a job running through transient failures: a job that stops on a broker
//! error (a stalled wait, a failed or aborted transaction, a write the client
//! gave up on) is started again with a new consumer and producer, and resumes
//! from its committed offsets (an exactly-once job's new producer fences the old
//! one and aborts its open transaction). Failing without an event acknowledged
//! for `recovery_timeout_s` stops it for good, so the process exits non-zero and its
//! supervisor restarts it.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use crate::error::EnrichError;
use crate::job::{self, JobSetup, JobSummary};

/// Runs an unbounded job until `shutdown`, starting it again after transient
/// errors (with backoff) until it has failed for `recovery_timeout` without an
/// event acknowledged. Returns the summary of its last run.
pub async fn run_resuming(
    setup: JobSetup,
    shutdown: CancellationToken,
    recovery_timeout: Duration,
) -> Result<JobSummary, EnrichError> {
    let job = setup.config.name.clone();
    let metrics = setup.metrics.of_job(&job);
    let mut delay = Duration::from_millis(250);
    let mut failing_since: Option<Instant> = None;
    loop {
        let acknowledged = metrics.acknowledged();
        let e = match job::run(setup.clone(), None, shutdown.clone()).await {
            Ok(summary) => return Ok(summary),
            Err(e) => e,
        };
        if !e.is_transient() || shutdown.is_cancelled() {
            return Err(e);
        }
        if metrics.acknowledged() > acknowledged {
            failing_since = None;
            delay = Duration::from_millis(250);
        }
        let since = *failing_since.get_or_insert_with(Instant::now);
        if since.elapsed() > recovery_timeout {
            error!(%job, error = %e, failing_for = ?since.elapsed(), "the job did not recover within recovery_timeout_s; stopping");
            return Err(e);
        }
        warn!(%job, error = %e, retry_in = ?delay, "job interrupted; starting it again from the committed offsets");
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shutdown.cancelled() => return Err(e),
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}
