//! The plugin crate `wasmloop dev` works on: where it is, where its component lands, and
//! building it with cargo.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// A plugin crate, located with `cargo metadata`.
#[derive(Debug)]
pub struct PluginCrate {
    /// The directory of its `Cargo.toml`.
    pub dir: PathBuf,
    pub manifest_path: PathBuf,
    /// The package name.
    pub package: String,
    /// Cargo's target directory (honours `CARGO_TARGET_DIR` and workspaces).
    pub target_dir: PathBuf,
    /// The cargo profile to build with.
    pub profile: String,
}

/// A finished build: the component and how long it took.
pub struct Built {
    pub wasm: Vec<u8>,
    pub took: Duration,
}

/// A failed build: cargo's messages, without its progress lines.
pub struct BuildFailed(pub String);

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

impl PluginCrate {
    /// The crate whose `Cargo.toml` is in `dir`.
    pub fn locate(dir: &Path, profile: &str) -> anyhow::Result<Self> {
        let manifest_path = dir.join("Cargo.toml");
        if !manifest_path.exists() {
            bail!("{} has no Cargo.toml: give `wasmloop dev` a plugin crate's directory", dir.display());
        }
        let out = std::process::Command::new(cargo())
            .args(["metadata", "--no-deps", "--format-version", "1", "--manifest-path"])
            .arg(&manifest_path)
            .output()
            .context("running cargo metadata")?;
        if !out.status.success() {
            bail!("cargo metadata for {}: {}", manifest_path.display(), String::from_utf8_lossy(&out.stderr).trim());
        }
        let meta: serde_json::Value = serde_json::from_slice(&out.stdout).context("reading cargo metadata's output")?;
        let manifest_path = manifest_path.canonicalize()?;
        let package = meta["packages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["manifest_path"].as_str().map(Path::new) == Some(manifest_path.as_path()))
            .and_then(|p| p["name"].as_str())
            .with_context(|| {
                format!("{} is not a package (a workspace root?): run `wasmloop dev` on the plugin's own crate", manifest_path.display())
            })?
            .to_string();
        let target_dir = meta["target_directory"].as_str().context("cargo metadata without target_directory")?.into();
        let dir = manifest_path.parent().context("Cargo.toml without a directory")?.to_path_buf();
        Ok(Self { dir, manifest_path, package, target_dir, profile: profile.to_string() })
    }

    /// Where cargo writes the component (dashes in the crate name become underscores).
    pub fn wasm_path(&self) -> PathBuf {
        let profile_dir = match self.profile.as_str() {
            "dev" | "test" => "debug",
            "bench" => "release",
            other => other,
        };
        self.target_dir.join("wasm32-wasip2").join(profile_dir).join(format!("{}.wasm", self.package.replace('-', "_")))
    }

    /// `cargo build --target wasm32-wasip2 --profile <profile>`; killed if the future is dropped
    /// (a newer save supersedes this build).
    pub async fn build(&self) -> anyhow::Result<Result<Built, BuildFailed>> {
        let started = Instant::now();
        let out = tokio::process::Command::new(cargo())
            .args(["build", "--target", "wasm32-wasip2", "--message-format", "short", "--profile", &self.profile, "--manifest-path"])
            .arg(&self.manifest_path)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .context("running cargo build")?;
        if !out.status.success() {
            let messages = String::from_utf8_lossy(&out.stderr)
                .lines()
                .filter(|l| {
                    let l = l.trim_start();
                    !(l.starts_with("Compiling") || l.starts_with("Blocking") || l.starts_with("Building"))
                })
                .collect::<Vec<_>>()
                .join("\n");
            return Ok(Err(BuildFailed(messages)));
        }
        let path = self.wasm_path();
        let wasm = std::fs::read(&path).with_context(|| format!("reading {} after the build", path.display()))?;
        Ok(Ok(Built { wasm, took: started.elapsed() }))
    }
}
