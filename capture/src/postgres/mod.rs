//! PostgreSQL as a capture source: logical replication with the `pgoutput`
//! plugin. So far: its log positions ([`lsn`]) and its messages ([`pgoutput`]).

pub mod lsn;
pub mod pgoutput;
