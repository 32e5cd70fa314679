//! The allocator `tributary` runs with: mimalloc, with the purge delay of
//! `tributary_allocator` unless the environment sets one. mimalloc itself
//! reports the options it runs with (`MIMALLOC_VERBOSE=1`, on stderr, as each
//! program image loads).

#![allow(clippy::unwrap_used)] // tests fail loudly

use std::process::Command;

use tributary_allocator::{PURGE_DELAY_MS, PURGE_DELAY_VAR};

/// The purge delays mimalloc reported, one per program image loaded, and
/// what the command printed.
fn run_version(purge_delay: Option<&str>) -> (Vec<u64>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tributary"));
    command.arg("--version").env("MIMALLOC_VERBOSE", "1");
    command.env_remove(PURGE_DELAY_VAR);
    if let Some(delay) = purge_delay {
        command.env(PURGE_DELAY_VAR, delay);
    }
    let out = command.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    let delays = stderr
        .lines()
        .filter_map(|line| line.trim().strip_prefix("option 'purge_delay': "))
        .map(|n| n.trim().parse().unwrap())
        .collect();
    (delays, String::from_utf8(out.stdout).unwrap())
}

#[test]
fn tributary_runs_with_its_purge_delay_and_runs_once() {
    let (delays, stdout) = run_version(None);
    // The first image ran with mimalloc's default, then started again tuned.
    assert_eq!(delays.len(), 2, "{delays:?}");
    assert_ne!(delays[0], PURGE_DELAY_MS, "the default differs: {delays:?}");
    assert_eq!(delays[1], PURGE_DELAY_MS);
    assert_eq!(stdout.matches("tributary").count(), 1, "{stdout}");
}

#[test]
fn a_purge_delay_the_environment_sets_is_kept() {
    let (delays, stdout) = run_version(Some("250"));
    assert_eq!(delays, [250], "not started again");
    assert_eq!(stdout.matches("tributary").count(), 1, "{stdout}");
}
