//! Consistent, incremental checkpoints of the store, and restoring from them.
//!
//! A checkpoint is a RocksDB checkpoint (hard links, so consistent and cheap)
//! copied to a directory, typically a mounted volume. Since the stored offsets
//! live in the same database, a checkpoint holds the rows *and* the positions
//! they correspond to: an instance restored from it replays only the changelog
//! tail. Layout of the destination:
//!
//! ```text
//! <dest>/shared/000123.sst          table files, immutable, shared by checkpoints
//! <dest>/ckpt-<epoch ms>/files.json the shared files this checkpoint uses
//! <dest>/ckpt-<epoch ms>/…          MANIFEST, CURRENT, OPTIONS, WAL: copied per checkpoint
//! ```
//!
//! Table files already in `shared/` are not copied again (incremental); the
//! oldest checkpoints beyond `keep` are deleted, with the shared files no
//! retained checkpoint uses. One destination per instance lineage: table file
//! numbers are unique within a database, not across unrelated ones.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tracing::info;

use crate::error::TableError;
use crate::store::Store;

const SHARED: &str = "shared";
const MANIFEST: &str = "files.json";

/// What one checkpoint took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointStats {
    /// Checkpoint name (`ckpt-<epoch ms>`).
    pub name: String,
    /// Files copied into the destination.
    pub files_copied: usize,
    /// Table files already present and reused.
    pub files_reused: usize,
    /// Bytes copied.
    pub bytes_copied: u64,
}

#[derive(Serialize, Deserialize)]
struct Manifest {
    shared: Vec<String>,
    created_ms: u128,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TableError + '_ {
    move |source| TableError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Checkpoints `store` into `dest`, keeping the newest `keep` checkpoints.
pub fn create(
    store: &Store,
    data_dir: &Path,
    dest: &Path,
    keep: usize,
) -> Result<CheckpointStats, TableError> {
    let created_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let name = format!("ckpt-{created_ms:015}");
    let local = data_dir.join(".checkpoint-tmp");
    if local.exists() {
        fs::remove_dir_all(&local).map_err(io(&local))?;
    }
    store.checkpoint(&local)?;

    let shared = dest.join(SHARED);
    fs::create_dir_all(&shared).map_err(io(&shared))?;
    let staging = dest.join(format!(".tmp-{name}"));
    fs::create_dir_all(&staging).map_err(io(&staging))?;
    let mut stats = CheckpointStats {
        name: name.clone(),
        files_copied: 0,
        files_reused: 0,
        bytes_copied: 0,
    };
    let mut manifest = Manifest {
        shared: Vec::new(),
        created_ms,
    };
    for entry in fs::read_dir(&local).map_err(io(&local))? {
        let path = entry.map_err(io(&local))?.path();
        let file_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let size = fs::metadata(&path).map_err(io(&path))?.len();
        if file_name.ends_with(".sst") {
            let target = shared.join(&file_name);
            if fs::metadata(&target).is_ok_and(|m| m.len() == size) {
                stats.files_reused += 1;
            } else {
                copy_atomically(&path, &target)?;
                stats.files_copied += 1;
                stats.bytes_copied += size;
            }
            manifest.shared.push(file_name);
        } else {
            fs::copy(&path, staging.join(&file_name)).map_err(io(&path))?;
            stats.files_copied += 1;
            stats.bytes_copied += size;
        }
    }
    let manifest_path = staging.join(MANIFEST);
    fs::write(
        &manifest_path,
        serde_json::to_vec_pretty(&manifest).expect("manifest serializes"),
    )
    .map_err(io(&manifest_path))?;
    let final_dir = dest.join(&name);
    fs::rename(&staging, &final_dir).map_err(io(&final_dir))?;
    fs::remove_dir_all(&local).map_err(io(&local))?;
    prune(dest, keep.max(1))?;
    info!(checkpoint = %name, copied = stats.files_copied, reused = stats.files_reused, bytes = stats.bytes_copied, "checkpoint written");
    Ok(stats)
}

fn copy_atomically(from: &Path, to: &Path) -> Result<(), TableError> {
    let partial = to.with_extension("partial");
    fs::copy(from, &partial).map_err(io(from))?;
    fs::rename(&partial, to).map_err(io(to))
}

/// Checkpoint names in `dest`, oldest first.
pub fn list(dest: &Path) -> Result<Vec<String>, TableError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dest).map_err(io(dest))? {
        let name = entry
            .map_err(io(dest))?
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.starts_with("ckpt-") {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

fn read_manifest(dir: &Path) -> Result<Manifest, TableError> {
    let path = dir.join(MANIFEST);
    let raw = fs::read(&path).map_err(io(&path))?;
    serde_json::from_slice(&raw).map_err(|e| TableError::Io {
        path,
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })
}

fn prune(dest: &Path, keep: usize) -> Result<(), TableError> {
    let names = list(dest)?;
    let (old, kept) = names.split_at(names.len().saturating_sub(keep));
    for name in old {
        let dir = dest.join(name);
        fs::remove_dir_all(&dir).map_err(io(&dir))?;
    }
    let mut used = BTreeSet::new();
    for name in kept {
        used.extend(read_manifest(&dest.join(name))?.shared);
    }
    let shared = dest.join(SHARED);
    for entry in fs::read_dir(&shared).map_err(io(&shared))? {
        let path = entry.map_err(io(&shared))?.path();
        let file_name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if !used.contains(file_name) {
            fs::remove_file(&path).map_err(io(&path))?;
        }
    }
    Ok(())
}

/// Restores checkpoint `name` (the newest when `None`) from `dest` into an empty `data_dir`.
pub fn restore(dest: &Path, name: Option<&str>, data_dir: &Path) -> Result<String, TableError> {
    if data_dir.join("CURRENT").exists() {
        return Err(TableError::Io {
            path: data_dir.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "the data directory already holds a store; restore only into an empty one",
            ),
        });
    }
    let name = match name {
        Some(n) => n.to_owned(),
        None => list(dest)?.pop().ok_or_else(|| TableError::Io {
            path: dest.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no checkpoint here"),
        })?,
    };
    let dir: PathBuf = dest.join(&name);
    let manifest = read_manifest(&dir)?;
    fs::create_dir_all(data_dir).map_err(io(data_dir))?;
    for file in &manifest.shared {
        let from = dest.join(SHARED).join(file);
        fs::copy(&from, data_dir.join(file)).map_err(io(&from))?;
    }
    for entry in fs::read_dir(&dir).map_err(io(&dir))? {
        let path = entry.map_err(io(&dir))?.path();
        if path.file_name().is_some_and(|n| n != MANIFEST) {
            fs::copy(&path, data_dir.join(path.file_name().expect("a file name")))
                .map_err(io(&path))?;
        }
    }
    info!(checkpoint = %name, data_dir = %data_dir.display(), "restored");
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RocksDbConfig;

    fn write(store: &Store, from: i64, to: i64) {
        let mut batch = store.batch();
        for i in from..to {
            batch
                .upsert("t", 0, &i.to_be_bytes(), format!("row {i}").as_bytes())
                .unwrap();
        }
        batch.offset("t", 0, to - 1).unwrap();
        batch.commit().unwrap();
    }

    #[test]
    fn incremental_checkpoints_restore_rows_and_offsets() {
        let (data, dest, restored) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        let store = Store::open(data.path(), &RocksDbConfig::default()).unwrap();
        write(&store, 0, 1000);
        let first = create(&store, data.path(), dest.path(), 2).unwrap();
        assert!(first.files_copied > 0);
        write(&store, 1000, 2000);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = create(&store, data.path(), dest.path(), 2).unwrap();
        assert!(
            second.files_reused >= 1,
            "table files of the first checkpoint are reused: {second:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
        create(&store, data.path(), dest.path(), 2).unwrap();
        assert_eq!(list(dest.path()).unwrap().len(), 2, "retention keeps two");

        let target = restored.path().join("db");
        restore(dest.path(), None, &target).unwrap();
        let copy = Store::open_read_only(&target).unwrap();
        assert_eq!(copy.stored_offset("t", 0).unwrap(), Some(1999));
        assert_eq!(
            copy.get("t", 0, &1500i64.to_be_bytes()).unwrap().unwrap(),
            b"row 1500"
        );
        assert!(
            restore(dest.path(), None, &target).is_err(),
            "never over an existing store"
        );
    }
}
