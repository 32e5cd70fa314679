//! [`JoinTables`]: the tables a job file's joins read, as handed from whatever
//! started them (`tributary_tables::JobTables`) to the jobs.

use std::sync::Arc;

use crate::partitions::HeldPartitions;
use crate::table::Table;

/// The tables a job file's joins read.
#[derive(Clone, Default)]
pub struct JoinTables {
    /// Every table, by [`Table::name`].
    pub tables: Vec<Arc<dyn Table>>,
    /// The partitions of local tables (`None` without local tables): jobs make
    /// co-partitioned ones follow their input partitions, and wait for them.
    pub held: Option<Arc<dyn HeldPartitions>>,
}
