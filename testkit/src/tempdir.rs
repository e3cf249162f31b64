//! [`TempDir`]: a uniquely named scratch directory that is deleted on drop.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Distinguishes directories created by the same process.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A fresh directory under [`std::env::temp_dir`], removed with its contents
/// on drop (best effort: a leftover in the temp dir is harmless).
///
/// Each [`RedisServer`](crate::RedisServer) keeps its data in one; tests use
/// them for database files and certificates.
#[must_use = "the directory is deleted as soon as it is dropped"]
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `leasehold-<label>-<pid>-<counter>`, distinct from
    /// every other directory this process creates, replacing any stale
    /// directory of that name left behind by a crashed earlier process.
    ///
    /// Fails if the directory cannot be created, e.g. when `label` contains
    /// a path separator.
    pub fn new(label: &str) -> io::Result<TempDir> {
        let name = format!(
            "leasehold-{label}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
        );
        let path = std::env::temp_dir().join(name);
        // A leftover from an earlier process with the same pid; nothing to keep.
        let _ = fs::remove_dir_all(&path);
        fs::create_dir(&path)?;
        Ok(TempDir { path })
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Best effort: a leftover directory in the temp dir is harmless.
        let _ = fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_distinct_directories_and_removes_them() {
        let first = TempDir::new("unit");
        let second = TempDir::new("unit");
        let (first, second) = (first.unwrap(), second.unwrap());
        assert_ne!(first.path(), second.path());
        assert!(first.path().is_dir() && second.path().is_dir());
        let path = first.path().to_owned();
        fs::write(path.join("file"), b"x").unwrap();
        drop(first);
        assert!(!path.exists());
    }

    #[test]
    fn label_with_a_path_separator_is_an_error_not_a_nested_directory() {
        assert!(TempDir::new("a/b").is_err());
    }
}
