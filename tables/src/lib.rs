//! Tributary tables: local RocksDB tables materialized from change topics, and
//! remote tables behind cache, rate limit and batching.
//!
//! Not built yet: see the issues "partitioned local RocksDB tables" and
//! "remote tables". The crate exists so the workspace has its final shape and
//! the native dependencies (RocksDB) are built and cached once.
