//! Python tools the benches run (a peer, the plotter), each installed from
//! PyPI on first use into a virtualenv of its own under `~/.cache/tributary`.

use std::path::PathBuf;

use anyhow::Context as _;

/// The interpreter of the virtualenv `~/.cache/tributary/<name>`, created with
/// `packages` (pinned requirement strings) if it does not exist yet.
pub(crate) async fn venv_python(name: &str, packages: &[&str]) -> anyhow::Result<PathBuf> {
    let home = std::env::var("HOME").context("HOME is not set")?;
    let venv = PathBuf::from(home).join(".cache/tributary").join(name);
    let python = venv.join("bin/python");
    if python.exists() {
        return Ok(python);
    }
    eprintln!(
        "[bench] installing {} from PyPI into {}",
        packages.join(" "),
        venv.display()
    );
    let created = tokio::process::Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .await?;
    anyhow::ensure!(
        created.success(),
        "python3 -m venv {} failed",
        venv.display()
    );
    let installed = tokio::process::Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet"])
        .args(packages)
        .status()
        .await?;
    if !installed.success() {
        // A half-made virtualenv would be taken for a ready one next time.
        let _ = std::fs::remove_dir_all(&venv);
        anyhow::bail!("pip install {} failed", packages.join(" "));
    }
    Ok(python)
}
