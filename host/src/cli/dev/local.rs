//! `wasmloop dev --local`: the project's throw-away control plane (`scripts/control-plane.sh`),
//! started for the session and stopped when it ends.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use tracing::info;

use super::log::DEV_LOG;

/// A running local control plane, stopped on drop.
pub struct LocalControlPlane {
    script: PathBuf,
    dir: String,
    pub kubeconfig: PathBuf,
}

impl LocalControlPlane {
    /// `control-plane.sh start` of the checkout this binary was built from.
    pub fn start() -> anyhow::Result<Self> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/control-plane.sh");
        if !script.exists() {
            bail!("--local needs the wasmloop checkout this binary was built from ({} is gone): use --kubeconfig", script.display());
        }
        info!(target: DEV_LOG, "starting the local control plane (the first run builds it: minutes)");
        let out = std::process::Command::new(&script).arg("start").output().context("running control-plane.sh start")?;
        if !out.status.success() {
            bail!("control-plane.sh start failed:\n{}", String::from_utf8_lossy(&out.stderr));
        }
        let dir = String::from_utf8(out.stdout)?.trim().to_string();
        let kubeconfig = PathBuf::from(&dir).join("kubeconfig");
        info!(target: DEV_LOG, "local control plane in {dir}; for kubectl: export KUBECONFIG={}", kubeconfig.display());
        Ok(Self { script, dir, kubeconfig })
    }
}

impl Drop for LocalControlPlane {
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.script).arg("stop").arg(&self.dir).output();
    }
}
