//! Saves in a plugin: file system events (inotify through `notify`), without what its build
//! writes (cargo's target directory; `build/`, `dist/`, `node_modules/`; `__pycache__`), hidden
//! files and editor swap files, folded into one change per burst.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How long after a save more events still count as the same save (editors write a file in
/// several steps: a temporary file, a rename, a chmod).
const SETTLE: Duration = Duration::from_millis(50);

/// Changes under a crate directory, as they happen.
pub struct Changes {
    rx: mpsc::UnboundedReceiver<(Instant, PathBuf)>,
    _watcher: notify::RecommendedWatcher,
}

impl Changes {
    /// Watch `dir` recursively, ignoring everything under `ignore` (what the build writes).
    pub fn watch(dir: &Path, ignore: &[PathBuf]) -> anyhow::Result<Self> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (root, ignore) = (dir.to_path_buf(), ignore.to_vec());
        let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else { return };
            if !matches!(event.kind, EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_)) {
                return;
            }
            for path in event.paths.into_iter().filter(|p| is_source(p, &root, &ignore)) {
                let _ = tx.send((Instant::now(), path));
            }
        })
        .context("starting the file watcher")?;
        watcher.watch(dir, RecursiveMode::Recursive).with_context(|| format!("watching {}", dir.display()))?;
        Ok(Self { rx, _watcher: watcher })
    }

    /// The next save: when its first write happened (even if read later) and the files it touched.
    pub async fn next(&mut self) -> Option<(Instant, Vec<PathBuf>)> {
        let (began, first) = self.rx.recv().await?;
        let mut paths = vec![first];
        while let Ok(Some((_, path))) = tokio::time::timeout(SETTLE, self.rx.recv()).await {
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
        Some((began, paths))
    }
}

/// Whether a change to `path` can change the plugin: not under `outputs`, not hidden inside
/// the plugin directory `root` (the plugin itself may well be in a hidden directory), not an
/// editor's backup or swap file, not what cargo or Python write themselves.
fn is_source(path: &Path, root: &Path, outputs: &[PathBuf]) -> bool {
    if outputs.iter().any(|o| path.starts_with(o)) {
        return false;
    }
    if path.components().any(|c| c.as_os_str() == "__pycache__") {
        return false;
    }
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else { return false };
    let hidden = path
        .strip_prefix(root)
        .unwrap_or(path)
        .components()
        .any(|c| c.as_os_str().to_str().is_some_and(|s| s.starts_with('.') && s.len() > 1 && s != ".."));
    // Cargo.lock: cargo writes it itself when a build resolves dependencies.
    !(hidden || name.ends_with('~') || name.ends_with(".swp") || name.ends_with(".swx") || name == "4913" || name == "Cargo.lock")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_exclude_target_hidden_and_editor_files() {
        let (root, target) = (Path::new("/p"), &[PathBuf::from("/p/target")][..]);
        assert!(is_source(Path::new("/p/src/lib.rs"), root, target));
        assert!(is_source(Path::new("/p/welcome.plugin.yaml"), root, target));
        assert!(!is_source(Path::new("/p/target/wasm32-wasip2/release/p.wasm"), root, target));
        assert!(!is_source(Path::new("/p/.git/index"), root, target));
        assert!(!is_source(Path::new("/p/src/.lib.rs.swp"), root, target));
        assert!(!is_source(Path::new("/p/src/lib.rs~"), root, target));
        assert!(!is_source(Path::new("/p/src/4913"), root, target));
        assert!(!is_source(Path::new("/p/Cargo.lock"), root, target));
        // A crate inside a hidden directory (a tempdir such as /tmp/.tmpXYZ) is watched.
        let (root, target) = (Path::new("/tmp/.tmp1/p"), &[PathBuf::from("/tmp/.tmp1/p/target")][..]);
        assert!(is_source(Path::new("/tmp/.tmp1/p/src/lib.rs"), root, target));
        assert!(!is_source(Path::new("/tmp/.tmp1/p/.git/HEAD"), root, target));
        // An npm package's and a Python project's build outputs.
        let outputs = [PathBuf::from("/p/build"), PathBuf::from("/p/dist"), PathBuf::from("/p/node_modules")];
        assert!(is_source(Path::new("/p/src/plugin.ts"), Path::new("/p"), &outputs));
        assert!(!is_source(Path::new("/p/dist/plugin.js"), Path::new("/p"), &outputs));
        assert!(!is_source(Path::new("/p/node_modules/x/index.js"), Path::new("/p"), &outputs));
        assert!(!is_source(Path::new("/p/src/__pycache__/plugin.cpython-311.pyc"), Path::new("/p"), &outputs));
    }

    #[tokio::test]
    async fn a_burst_of_writes_is_one_change() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        std::fs::create_dir(dir.join("src")).unwrap();
        let mut changes = Changes::watch(&dir, &[dir.join("target")]).unwrap();
        std::fs::create_dir(dir.join("target")).unwrap();
        std::fs::write(dir.join("target/ignored"), "x").unwrap();
        std::fs::write(dir.join("src/lib.rs"), "a").unwrap();
        std::fs::write(dir.join("Cargo.toml"), "b").unwrap();
        let (_, paths) = tokio::time::timeout(Duration::from_secs(10), changes.next()).await.unwrap().unwrap();
        assert!(paths.contains(&dir.join("src/lib.rs")) && paths.contains(&dir.join("Cargo.toml")), "{paths:?}");
        assert!(paths.iter().all(|p| !p.starts_with(dir.join("target"))), "{paths:?}");
        // Nothing more is pending once the burst is read.
        assert!(tokio::time::timeout(Duration::from_millis(300), changes.next()).await.is_err());
    }
}
