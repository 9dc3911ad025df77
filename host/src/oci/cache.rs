//! [`BlobCache`]: OCI blobs (manifests, layers, signatures) on disk by digest, beside the
//! precompiled cache, so a host restart pulls nothing it pulled before. Every read is checked
//! against its digest: a file altered on disk is dropped and pulled again.

use std::path::{Path, PathBuf};

use super::{digest_of, is_sha256};

/// What went wrong with the cache directory.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The directory cannot be created or written.
    #[error("OCI blob cache {dir}: {source}")]
    Io {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// A result whose error is the cache's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A directory of blobs, `sha256/<hex>`.
#[derive(Clone, Debug)]
pub struct BlobCache {
    dir: PathBuf,
}

impl BlobCache {
    /// The cache in `dir` (created).
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(dir.join("sha256")).map_err(|source| Error::Io { dir: dir.clone(), source })?;
        Ok(Self { dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, digest: &str) -> Option<PathBuf> {
        is_sha256(digest).then(|| self.dir.join("sha256").join(&digest["sha256:".len()..]))
    }

    /// The blob of `digest`, if cached, at most `limit` bytes and intact (a corrupt one is removed).
    pub fn get(&self, digest: &str, limit: u64) -> Option<Vec<u8>> {
        let path = self.path(digest)?;
        let bytes = crate::bounded::read_file(&path, limit).ok()?;
        if digest_of(&bytes) == digest {
            Some(bytes)
        } else {
            tracing::warn!(path = %path.display(), "cached OCI blob does not match its digest; removed");
            let _ = std::fs::remove_file(&path);
            None
        }
    }

    /// Keep `bytes` (whose digest the caller checked is `digest`); failures are logged, not fatal.
    pub fn put(&self, digest: &str, bytes: &[u8]) {
        let Some(path) = self.path(digest) else { return };
        if path.exists() {
            return;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if let Err(e) = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, &path)) {
            tracing::warn!(path = %path.display(), error = %e, "cannot keep OCI blob");
            let _ = std::fs::remove_file(&tmp);
        }
    }

    /// The digest a reference's tag (`repo:tag` key) was last resolved to, if remembered.
    pub fn tag(&self, key: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.tag_path(key)).ok()?;
        let d = text.trim();
        is_sha256(d).then(|| d.to_string())
    }

    /// Remember that `key` (`registry/repo:tag`) resolved to `digest`.
    pub fn set_tag(&self, key: &str, digest: &str) {
        let path = self.tag_path(key);
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        if let Err(e) = std::fs::write(&path, digest) {
            tracing::warn!(path = %path.display(), error = %e, "cannot remember a resolved tag");
        }
    }

    fn tag_path(&self, key: &str) -> PathBuf {
        self.dir.join("tags").join(hex::encode(<sha2::Sha256 as sha2::Digest>::digest(key.as_bytes())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_are_kept_by_digest_and_checked_when_read() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlobCache::new(dir.path()).unwrap();
        let d = digest_of(b"blob");
        assert_eq!(cache.get(&d, 100), None);
        cache.put(&d, b"blob");
        assert_eq!(cache.get(&d, 100).as_deref(), Some(&b"blob"[..]));
        assert_eq!(cache.get(&d, 2), None, "over the limit: not read");
        // Altered on disk: dropped.
        std::fs::write(dir.path().join("sha256").join(&d[7..]), b"evil").unwrap();
        assert_eq!(cache.get(&d, 100), None);
        assert!(!dir.path().join("sha256").join(&d[7..]).exists());
        // Not a digest: nothing is read or written outside the directory.
        cache.put("sha256:../../x", b"x");
        assert_eq!(cache.get("sha256:../../x", 100), None);
    }

    #[test]
    fn tags_are_remembered() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlobCache::new(dir.path()).unwrap();
        assert_eq!(cache.tag("r/x:v1"), None);
        let d = digest_of(b"m");
        cache.set_tag("r/x:v1", &d);
        assert_eq!(cache.tag("r/x:v1"), Some(d));
    }
}
