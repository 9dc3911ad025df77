//! A real OCI registry (Debian's docker-registry, TLS + basic auth) for one test binary, started
//! with `scripts/registry.sh` and stopped by a reaper when the binary exits (as the control plane).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail, ensure};

use crate::workspace_root;

/// A running registry: its directory (CA, credentials), address and credentials.
pub struct TestRegistry {
    /// The directory `registry.sh start` printed.
    pub dir: PathBuf,
    /// `127.0.0.1:PORT`.
    pub address: String,
    /// The CA certificate (PEM) that signed its serving certificate.
    pub ca_pem: Vec<u8>,
    /// A docker config with its credentials (the content of a dockerconfigjson Secret).
    pub docker_config: Vec<u8>,
    /// Basic-auth user and password.
    pub credentials: (String, String),
}

fn script() -> Command {
    Command::new(workspace_root().join("scripts/registry.sh"))
}

impl TestRegistry {
    /// Start a registry; it is stopped when this process exits.
    pub fn start() -> Result<Self> {
        let out = script().arg("start").stderr(Stdio::inherit()).output().context("running scripts/registry.sh start")?;
        if !out.status.success() {
            bail!("scripts/registry.sh start failed (run `scripts/registry.sh install` first?)");
        }
        let dir = PathBuf::from(String::from_utf8(out.stdout)?.trim());
        let pid = std::process::id();
        let script = workspace_root().join("scripts/registry.sh");
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "while kill -0 {pid} 2>/dev/null; do sleep 1; done; '{}' stop '{}' >/dev/null 2>&1",
                script.display(),
                dir.display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the registry reaper")?;
        let read = |name: &str| std::fs::read(dir.join(name)).with_context(|| format!("{}/{name}", dir.display()));
        let text = |name: &str| -> Result<String> { Ok(String::from_utf8(read(name)?)?.trim().to_string()) };
        Ok(Self {
            address: text("address")?,
            ca_pem: read("ca.crt")?,
            docker_config: read("dockerconfig.json")?,
            credentials: (text("username")?, text("password")?),
            dir,
        })
    }

    /// `oci://ADDRESS/REPO` + `suffix` (`@sha256:…` or `:tag`).
    pub fn reference(&self, repo: &str, suffix: &str) -> String {
        format!("oci://{}/{repo}{suffix}", self.address)
    }

    /// SIGKILL the registry (it is down until [`TestRegistry::restart`]).
    pub fn kill(&self) -> Result<()> {
        self.run("kill")
    }

    /// Start it again on the same port, storage and certificates.
    pub fn restart(&self) -> Result<()> {
        self.run("restart")
    }

    fn run(&self, verb: &str) -> Result<()> {
        let out = script().arg(verb).arg(&self.dir).output()?;
        ensure!(out.status.success(), "registry.sh {verb}: {}", String::from_utf8_lossy(&out.stderr));
        Ok(())
    }

    /// The file the registry stores blob `digest` in (to corrupt it under the registry).
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir.join("data/docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex).join("data")
    }
}

/// An ECDSA P-256 key pair made by openssl: (PKCS#8 private key PEM, public key PEM), as
/// `cosign generate-key-pair` makes (its private key encrypted; this one not).
pub fn p256_key_pair(dir: &Path, name: &str) -> Result<(String, String)> {
    let private = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub"));
    let sh = format!(
        "openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out '{}' && openssl pkey -in '{}' -pubout -out '{}'",
        private.display(),
        private.display(),
        public.display()
    );
    let out = Command::new("sh").arg("-c").arg(sh).output()?;
    ensure!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    Ok((std::fs::read_to_string(private)?, std::fs::read_to_string(public)?))
}
