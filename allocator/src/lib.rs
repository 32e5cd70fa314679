//! The process's memory allocator: mimalloc, for Rust's allocations and, with
//! its `override` feature, for C's `malloc` too (librdkafka's messages and
//! buffers, RocksDB's cache entries), and the one setting it is run with.
//!
//! Capture and enrichment allocate a few small objects per row; mimalloc's
//! thread-local free lists cost them less than glibc's `malloc` (BENCHMARKS.md,
//! capture and enrichment).
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

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
