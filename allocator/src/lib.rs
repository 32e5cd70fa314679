//! The process's memory allocator: mimalloc, as the C `malloc` (its
//! `override` feature) that Rust's allocations and C's (librdkafka's messages
//! and buffers, RocksDB's cache entries) both go to, and the one setting it is
//! run with.
//!
//! Capture and enrichment allocate a few small objects per row; mimalloc's
//! thread-local free lists cost them less than glibc's `malloc` (BENCHMARKS.md,
//! capture and enrichment).
//!
//! **Rust's allocations through `malloc`.** The global allocator is Rust's
//! default, `std::alloc::System`, which calls `malloc` for every layout of the
//! usual alignment (at most 16 bytes, and no more than the size), and that
//! `malloc` is mimalloc's. The `mimalloc` crate's own global allocator calls
//! `mi_malloc_aligned` for every layout instead; mimalloc 3 serves that from
//! its fast path only while a page of the size has a free block ready, and
//! otherwise over-allocates any size that is not a power of two (~150
//! instructions), which two of a decoded binlog row's allocations did every
//! time (BENCHMARKS.md, instructions per item, sessions 43 and 44).
//!
//! **The purge delay.** mimalloc hands memory that has been free for
//! `purge_delay` back to the OS (1 s by default), and every page of it used
//! again is then a page fault and a page zeroed by the kernel. librdkafka's
//! threads free what the job's threads allocated and the other way round, so
//! memory keeps cycling through free pages: a run of `bench enrich` took
//! 258,000–331,000 page faults with the default and 4,400–11,800 with a delay
//! of a minute, and its kernel CPU fell from 6.7–7.7 s to 3.9–5.0 s
//! (BENCHMARKS.md, enrichment, session 38). The delay used is
//! [`PURGE_DELAY_MS`]: a service's memory is bounded by its config, and what
//! a spike of load took is still given back once free for a minute.
//!
//! mimalloc reads its options from the environment as the process loads,
//! before any Rust code runs, and the workspace has no `unsafe` to call its
//! setter; so [`tune`] starts the same program again, in the same process
//! (`exec`), with `MIMALLOC_PURGE_DELAY` set. A delay the environment sets
//! already is kept as it is, which also ends the re-execution.

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::process::Command;

/// Keeps mimalloc's object, which defines `malloc`, in every program that
/// links this crate (nothing else here refers to it): Rust's own allocator,
/// `std::alloc::System`, is left as the global allocator, and calls that `malloc`.
#[used]
static KEEP_MIMALLOC: fn(&mimalloc::MiMalloc) -> u32 = mimalloc::MiMalloc::version;

/// The environment variable mimalloc reads its purge delay (ms) from.
pub const PURGE_DELAY_VAR: &str = "MIMALLOC_PURGE_DELAY";

/// How long memory stays free before mimalloc hands it back to the OS (ms).
pub const PURGE_DELAY_MS: u64 = 60_000;

/// Runs the program again, in this process, with mimalloc's purge delay set
/// to [`PURGE_DELAY_MS`], unless the environment sets one: call it first
/// thing in `main`, before any thread starts. Returns only when it does not
/// re-execute: `Ok` when the delay is set already, the reason otherwise (the
/// program then runs on with mimalloc's default, which is only slower).
pub fn tune() -> std::io::Result<()> {
    if std::env::var_os(PURGE_DELAY_VAR).is_some() {
        return Ok(());
    }
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("tributary"));
    // This process's own executable, even if its file was replaced since.
    Err(Command::new("/proc/self/exe")
        .arg0(arg0)
        .args(args)
        .env(PURGE_DELAY_VAR, PURGE_DELAY_MS.to_string())
        .exec())
}

/// The purge delay to give a child process of a tuned program: the
/// environment's, else [`PURGE_DELAY_MS`]. A child started with it runs as
/// the one program image it was started as, as a tool that follows one image
/// (valgrind) needs.
pub fn purge_delay() -> OsString {
    std::env::var_os(PURGE_DELAY_VAR).unwrap_or_else(|| PURGE_DELAY_MS.to_string().into())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail loudly

    /// The bytes mimalloc has committed for the process, from its statistics.
    fn committed() -> u64 {
        let json = mimalloc::MiMalloc::stats_json().unwrap();
        let stats: serde_json::Value = serde_json::from_slice(json.to_bytes()).unwrap();
        stats["committed"]["current"].as_u64().unwrap()
    }

    #[test]
    fn rusts_allocations_are_mimallocs() {
        let before = committed();
        let blocks: Vec<Box<[u8; 1000]>> = (0..50_000).map(|_| Box::new([1; 1000])).collect();
        let grown = committed().saturating_sub(before);
        assert!(
            grown >= 40_000_000,
            "50 MB allocated by Rust, mimalloc committed {grown} bytes more"
        );
        drop(blocks);
    }
}
