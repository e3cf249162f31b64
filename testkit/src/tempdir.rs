//! A uniquely named scratch directory that is deleted on drop.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Distinguishes directories created by the same process.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A directory under [`std::env::temp_dir`], removed with its contents on drop.
#[derive(Debug)]
pub(crate) struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `distributed-lock-testkit-<pid>-<counter>-<port>`, replacing any
    /// stale directory of that name left behind by a crashed earlier process.
    pub(crate) fn new(port: u16) -> io::Result<Self> {
        let name = format!(
            "distributed-lock-testkit-{}-{}-{port}",
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
    pub(crate) fn path(&self) -> &Path {
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
        let first = TempDir::new(1);
        let second = TempDir::new(1);
        let (first, second) = (first.unwrap(), second.unwrap());
        assert_ne!(first.path(), second.path());
        assert!(first.path().is_dir() && second.path().is_dir());
        let path = first.path().to_owned();
        fs::write(path.join("file"), b"x").unwrap();
        drop(first);
        assert!(!path.exists());
    }
}
