//! Cores for benchmarks that measure a server: the server (ours or a peer) on
//! [`SERVER_CORE`], its load generator on [`CLIENT_CORE`], with `taskset`, so
//! servers are compared on the same core budget and the generator never takes
//! the server's CPU.

use anyhow::Context as _;

/// The core every measured server runs on.
pub(crate) const SERVER_CORE: &str = "0";
/// The core every load generator (and the benchmark itself) runs on.
pub(crate) const CLIENT_CORE: &str = "1";

/// Fails unless `taskset` is there and this machine has the two cores.
pub(crate) fn check() -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    anyhow::ensure!(
        cores >= 2,
        "the pinned benchmark needs 2 cores (one for the server, one for the load); this process may use {cores}"
    );
    let found = std::process::Command::new("taskset")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    anyhow::ensure!(found, "taskset (util-linux) is not installed");
    Ok(())
}

/// `program` to be started on `core`.
pub(crate) fn on_core(core: &str, program: impl AsRef<std::ffi::OsStr>) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("taskset");
    command.args(["-c", core]).arg(program);
    command
}

/// A running process whose threads are held on one core until this is
/// dropped, when their former affinity comes back.
pub(crate) struct Pinned {
    pid: u32,
    former_mask: String,
}

impl Pinned {
    /// Pins every thread of `pid` to `core`.
    pub(crate) fn pin(pid: u32, core: &str) -> anyhow::Result<Self> {
        let out = std::process::Command::new("taskset")
            .args(["-p", &pid.to_string()])
            .output()?;
        anyhow::ensure!(out.status.success(), "taskset -p {pid} failed");
        // "pid 123's current affinity mask: 3"
        let former_mask = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .last()
            .context("taskset printed no mask")?
            .to_owned();
        taskset(&["-a", "-p", "-c", core, &pid.to_string()])?;
        Ok(Pinned { pid, former_mask })
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Err(e) = taskset(&["-a", "-p", &self.former_mask, &self.pid.to_string()]) {
            eprintln!(
                "[bench] could not give process {} its cores back: {e}",
                self.pid
            );
        }
    }
}

fn taskset(args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new("taskset").args(args).output()?;
    anyhow::ensure!(
        out.status.success(),
        "taskset {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}
