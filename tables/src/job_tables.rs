//! [`JobTables`]: the tables enricher jobs join, started and stopped together:
//! the local tables (partitioned ones follow the jobs' input partitions), the
//! remote tables, and, when the tables file has a `grpc:` section, the lookup
//! API over them. Jobs see them only through the seams of
//! `tributary-table-api`: [`Table`] and [`HeldPartitions`].

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tributary_table_api::{HeldPartitions, JoinTables, Table};

use crate::config::TablesConfig;
use crate::error::TableError;
use crate::follower::Follower;
use crate::grpc::{self, LookupApi, ServedTables};
use crate::materializer::Materializer;
use crate::metrics::TablesMetrics;
use crate::progress::Progress;
use crate::remote::budget::Weights;
use crate::remote::{self, RemoteTables};

/// The running tables of a job file.
pub struct JobTables {
    materializer: Option<Materializer>,
    remote: RemoteTables,
    api: Option<LookupApi>,
    held: Option<Arc<Following>>,
    /// Stops the tables' tasks (after the jobs have drained).
    stop: CancellationToken,
}

impl JobTables {
    /// Starts the tables of `config` (none without one).
    pub async fn start(
        config: Option<&TablesConfig>,
        metrics: &TablesMetrics,
    ) -> Result<Self, TableError> {
        let mut tables = JobTables {
            materializer: None,
            remote: RemoteTables::default(),
            api: None,
            held: None,
            stop: CancellationToken::new(),
        };
        let Some(config) = config else {
            return Ok(tables);
        };
        // What started before a failure is stopped and waited for.
        match tables.start_all(config, metrics).await {
            Ok(()) => Ok(tables),
            Err(e) => {
                tables.close().await.ok();
                Err(e)
            }
        }
    }

    async fn start_all(
        &mut self,
        config: &TablesConfig,
        metrics: &TablesMetrics,
    ) -> Result<(), TableError> {
        let follower = Follower::default();
        let stop = self.stop.clone();
        let materializer =
            Materializer::start_following(config, metrics.clone(), stop.clone(), follower.clone())
                .await?;
        let materializer = self.materializer.insert(materializer);
        self.remote = remote::start_all(config, true, metrics, &stop).await?;
        self.held = Some(Arc::new(Following {
            follower,
            progress: materializer.progress(),
            weights: self.remote.weights.clone(),
        }));
        if let Some(settings) = &config.grpc {
            let served = ServedTables {
                local: materializer.tables().to_vec(),
                progress: Some(materializer.progress()),
                remote: self.remote.tables.clone(),
            };
            let api = grpc::start(config, settings, served, metrics.clone(), stop).await?;
            self.api = Some(api);
        }
        Ok(())
    }

    /// The tables as jobs see them: every table (local, then remote), and
    /// the local tables' partitions, which jobs follow and wait for.
    pub fn for_jobs(&self) -> JoinTables {
        let local = self.materializer.iter().flat_map(|m| m.tables());
        JoinTables {
            tables: local
                .map(|t| t.clone() as Arc<dyn Table>)
                .chain(
                    self.remote
                        .tables
                        .iter()
                        .map(|t| t.clone() as Arc<dyn Table>),
                )
                .collect(),
            held: self.held.clone().map(|h| h as Arc<dyn HeldPartitions>),
        }
    }

    /// The local tables' partitions and offsets, for readiness and status.
    pub fn progress(&self) -> Option<Arc<Progress>> {
        self.materializer.as_ref().map(Materializer::progress)
    }

    /// Stops every table task and waits for all of them, whichever failed.
    pub async fn close(self) -> Result<(), TableError> {
        self.stop.cancel();
        let materialized = match self.materializer {
            Some(materializer) => materializer.join().await,
            None => Ok(()),
        };
        let served = match self.api {
            Some(api) => api.join().await,
            None => Ok(()),
        };
        self.remote.close().await;
        materialized?;
        served
    }
}

/// [`HeldPartitions`] over the materializer: owners name partitions through
/// the [`Follower`], readiness comes from its [`Progress`]; the share of the
/// input held sizes this process's part of shared rate limits ([`Weights`]).
struct Following {
    follower: Follower,
    progress: Arc<Progress>,
    weights: Arc<Weights>,
}

impl HeldPartitions for Following {
    fn follow(&self, owner: &str, partitions: BTreeSet<i32>, of: u32) {
        self.weights.hold(owner, partitions.len(), of as usize);
        self.follower.want(owner, partitions);
    }

    fn is_ready(&self, table: &str, partition: i32) -> bool {
        self.progress.is_ready(table, partition)
    }

    fn all_ready(&self, table: &str, partitions: u32) -> bool {
        let held = self.progress.of_table(table);
        held.len() == partitions as usize && held.iter().all(|(_, p)| p.ready)
    }
}
