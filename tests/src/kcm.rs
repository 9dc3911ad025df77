//! kube-controller-manager v1.20.2 as the differential tests' reference: started with
//! `scripts/control-plane.sh kcm DIR <flags>` against the test control plane, ready once the
//! caches of the controllers it runs have synced, stopped (`control-plane.sh stop-kcm DIR`)
//! when dropped, also when a test fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};

use crate::{eventually, workspace_root};

/// A running kube-controller-manager.
pub struct Kcm {
    script: PathBuf,
    dir: PathBuf,
    pid: u32,
}

impl Kcm {
    /// Start it in control-plane directory `dir` with `flags` and wait until its log says
    /// `Caches are synced for <name>` for every name of `synced` (e.g. `ReplicaSet`,
    /// `deployment`, `garbage collector`).
    pub async fn start(dir: &Path, flags: &[&str], synced: &[&str]) -> Result<Self> {
        ensure!(
            dir.join("env").exists(),
            "{} is not a directory of scripts/control-plane.sh: point WASMLOOP_TEST_KUBECONFIG at <dir>/kubeconfig of one (or leave it unset)",
            dir.display()
        );
        let script = workspace_root().join("scripts/control-plane.sh");
        let st = Command::new(&script).arg("kcm").arg(dir).args(flags).stdout(Stdio::null()).status()?;
        ensure!(st.success(), "{} kcm {} failed", script.display(), dir.display());
        let pid: u32 = std::fs::read_to_string(dir.join("kcm.pid")).context("reading kcm.pid")?.trim().parse()?;
        let kcm = Self { script, dir: dir.to_path_buf(), pid };
        let log = kcm.log();
        let wanted: Vec<String> = synced.iter().map(|s| format!("Caches are synced for {s}")).collect();
        let synced = eventually("kube-controller-manager's caches to sync", Duration::from_secs(90), || {
            let (log, alive, wanted) = (log.clone(), kcm.alive(), wanted.clone());
            async move {
                if !alive {
                    return Ok(Some(false));
                }
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                Ok(wanted.iter().all(|w| text.contains(w.as_str())).then_some(true))
            }
        })
        .await
        .with_context(|| format!("log {}:\n{}", log.display(), tail(&log, 20)))?;
        ensure!(synced, "kube-controller-manager exited during start; log {}:\n{}", log.display(), tail(&log, 20));
        Ok(kcm)
    }

    /// Its log file.
    pub fn log(&self) -> PathBuf {
        self.dir.join("kcm.log")
    }

    /// Whether the process still runs.
    pub fn alive(&self) -> bool {
        Path::new(&format!("/proc/{}", self.pid)).exists()
    }

    /// Stop it; an error if it had exited on its own.
    pub fn stop(self) -> Result<()> {
        ensure!(
            self.alive(),
            "kube-controller-manager exited during the scenarios; log {}:\n{}",
            self.log().display(),
            tail(&self.log(), 20)
        );
        Ok(()) // stopped by drop
    }
}

impl Drop for Kcm {
    fn drop(&mut self) {
        let _ = Command::new(&self.script).arg("stop-kcm").arg(&self.dir).stdout(Stdio::null()).status();
    }
}

/// The last `n` lines of a file (for error messages).
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
