//! PostgreSQL as a capture source: logical replication with the `pgoutput`
//! plugin. So far: its log positions ([`lsn`]), its messages ([`pgoutput`]),
//! what is read from the catalog ([`catalog`]), column types ([`pg_type`]),
//! values from their text form ([`text_value`]), and tables with their rows
//! decoded ([`pg_table`]).

pub mod catalog;
pub mod lsn;
pub mod pg_table;
pub mod pg_type;
pub mod pgoutput;
pub mod text_value;
