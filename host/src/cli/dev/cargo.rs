//! The plugin `wasmloop dev` works on: where it is, where its component lands, and building it:
//! a Rust crate with cargo, a TypeScript/JavaScript package with tsc (if it has a tsconfig.json)
//! and the SDK's `wasmloop-js build` (QuickJS), a Python project with `python -m
//! wasmloop_sdk.build` (componentize-py).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// How a plugin is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Toolchain {
    /// `Cargo.toml`: `cargo build --target wasm32-wasip2`.
    Cargo,
    /// `package.json`: `tsc` (with a tsconfig.json), then `wasmloop-js build` from its node_modules.
    Npm,
    /// `pyproject.toml`: `python -m wasmloop_sdk.build --src src` with `$WASMLOOP_PYTHON`, else
    /// the project's `.venv`, else `python3`.
    Python,
}

/// A plugin: a crate located with `cargo metadata`, or an npm package, or a Python project.
#[derive(Debug)]
pub struct PluginCrate {
    pub toolchain: Toolchain,
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
    /// The plugin in `dir`: a crate (`Cargo.toml`), an npm package (`package.json`) or a Python
    /// project (`pyproject.toml`).
    pub fn locate(dir: &Path, profile: &str) -> anyhow::Result<Self> {
        let manifest_path = dir.join("Cargo.toml");
        if !manifest_path.exists() {
            return Self::locate_other(dir, profile);
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
        Ok(Self { toolchain: Toolchain::Cargo, dir, manifest_path, package, target_dir, profile: profile.to_string() })
    }

    /// An npm package or a Python project: its name from package.json or pyproject.toml; the
    /// component goes to `build/plugin.wasm`.
    fn locate_other(dir: &Path, profile: &str) -> anyhow::Result<Self> {
        let dir = dir.canonicalize().with_context(|| format!("{}", dir.display()))?;
        let (toolchain, manifest_path) = if dir.join("package.json").exists() {
            (Toolchain::Npm, dir.join("package.json"))
        } else if dir.join("pyproject.toml").exists() {
            (Toolchain::Python, dir.join("pyproject.toml"))
        } else {
            bail!(
                "{} has no Cargo.toml, package.json or pyproject.toml: give `wasmloop dev` a plugin's directory \
                 (`wasmloop new --lang rust|ts|js|python` makes one)",
                dir.display()
            );
        };
        let text = std::fs::read_to_string(&manifest_path).with_context(|| format!("reading {}", manifest_path.display()))?;
        let package = match toolchain {
            Toolchain::Npm => serde_json::from_str::<serde_json::Value>(&text)
                .with_context(|| format!("parsing {}", manifest_path.display()))?["name"]
                .as_str()
                .map(str::to_string),
            _ => text.lines().find_map(|l| {
                let v = l.trim().strip_prefix("name")?.trim_start().strip_prefix('=')?.trim();
                Some(v.trim_matches('"').to_string())
            }),
        }
        .with_context(|| format!("{} has no name", manifest_path.display()))?;
        let target_dir = dir.join("build");
        Ok(Self { toolchain, dir, manifest_path, package, target_dir, profile: profile.to_string() })
    }

    /// Paths under the plugin that its build writes (not sources: a change there is no save).
    pub fn outputs(&self) -> Vec<PathBuf> {
        match self.toolchain {
            Toolchain::Cargo => vec![self.target_dir.clone()],
            Toolchain::Npm => {
                vec![self.target_dir.clone(), self.dir.join("dist"), self.dir.join("node_modules"), self.dir.join("package-lock.json")]
            }
            Toolchain::Python => vec![self.target_dir.clone()],
        }
    }

    /// The build commands: (program, arguments), run in order in the plugin's directory.
    fn commands(&self) -> Vec<(String, Vec<String>)> {
        let out = self.wasm_path().display().to_string();
        match self.toolchain {
            Toolchain::Cargo => vec![(
                cargo(),
                ["build", "--target", "wasm32-wasip2", "--message-format", "short", "--profile", &self.profile, "--manifest-path"]
                    .iter()
                    .map(ToString::to_string)
                    .chain([self.manifest_path.display().to_string()])
                    .collect(),
            )],
            Toolchain::Npm => {
                let mut c = Vec::new();
                if self.dir.join("tsconfig.json").exists() {
                    c.push(self.npm_bin("tsc", &["-p", "."]));
                }
                c.push(self.npm_bin("wasmloop-js", &["build", "-o", &out]));
                c
            }
            Toolchain::Python => {
                let venv = self.dir.join(".venv/bin/python");
                let python = std::env::var("WASMLOOP_PYTHON")
                    .ok()
                    .or_else(|| venv.exists().then(|| venv.display().to_string()))
                    .unwrap_or_else(|| "python3".into());
                let args = ["-m", "wasmloop_sdk.build", "--src", "src", "--build-dir", "build", "-o"];
                vec![(python, args.iter().map(ToString::to_string).chain([out]).collect())]
            }
        }
    }

    /// An npm package's tool: `node_modules/.bin/<name>` itself when installed (npx spends
    /// about half a second finding it: on every save, twice), else `npx --no-install <name>`.
    fn npm_bin(&self, name: &str, args: &[&str]) -> (String, Vec<String>) {
        let args = args.iter().map(ToString::to_string);
        let installed = self.dir.join("node_modules/.bin").join(name);
        if installed.exists() {
            (installed.display().to_string(), args.collect())
        } else {
            ("npx".to_string(), ["--no-install", name].into_iter().map(ToString::to_string).chain(args).collect())
        }
    }

    /// Where the build writes the component: cargo's (dashes in the crate name become
    /// underscores), or `build/plugin.wasm`.
    pub fn wasm_path(&self) -> PathBuf {
        if self.toolchain != Toolchain::Cargo {
            return self.target_dir.join("plugin.wasm");
        }
        let profile_dir = match self.profile.as_str() {
            "dev" | "test" => "debug",
            "bench" => "release",
            other => other,
        };
        self.target_dir.join("wasm32-wasip2").join(profile_dir).join(format!("{}.wasm", self.package.replace('-', "_")))
    }

    /// Build (`cargo build --target wasm32-wasip2 --profile <profile>`, or the package's
    /// commands); killed if the future is dropped (a newer save supersedes this build).
    pub async fn build(&self) -> anyhow::Result<Result<Built, BuildFailed>> {
        let started = Instant::now();
        for (program, args) in self.commands() {
            let out = tokio::process::Command::new(&program)
                .args(&args)
                .current_dir(&self.dir)
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .output()
                .await
                .with_context(|| format!("running {program}"))?;
            if !out.status.success() {
                let text = [String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)].join("\n");
                let messages = text
                    .lines()
                    .filter(|l| {
                        let l = l.trim_start();
                        !(l.is_empty() || l.starts_with("Compiling") || l.starts_with("Blocking") || l.starts_with("Building"))
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                return Ok(Err(BuildFailed(messages)));
            }
        }
        let path = self.wasm_path();
        let wasm = std::fs::read(&path).with_context(|| format!("reading {} after the build", path.display()))?;
        Ok(Ok(Built { wasm, took: started.elapsed() }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npm_and_python_plugins_are_found_with_their_build() {
        let tmp = tempfile::tempdir().unwrap();
        let js = tmp.path().join("js");
        std::fs::create_dir_all(&js).unwrap();
        std::fs::write(js.join("package.json"), r#"{"name": "greet", "devDependencies": {}}"#).unwrap();
        std::fs::write(js.join("tsconfig.json"), "{}").unwrap();
        let p = PluginCrate::locate(&js, "release").unwrap();
        assert_eq!((p.toolchain, p.package.as_str()), (Toolchain::Npm, "greet"));
        assert_eq!(p.wasm_path(), js.canonicalize().unwrap().join("build/plugin.wasm"));
        let steps: Vec<String> = p.commands().iter().map(|(c, a)| format!("{c} {}", a.join(" "))).collect();
        assert_eq!(steps[0], "npx --no-install tsc -p .");
        assert!(steps[1].starts_with("npx --no-install wasmloop-js build -o ") && steps[1].ends_with("build/plugin.wasm"), "{steps:?}");
        assert!(p.outputs().contains(&js.canonicalize().unwrap().join("node_modules")));
        // Installed tools are run without npx.
        let bin = js.join("node_modules/.bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("tsc"), "").unwrap();
        let steps: Vec<String> = p.commands().iter().map(|(c, a)| format!("{c} {}", a.join(" "))).collect();
        assert_eq!(steps[0], format!("{} -p .", js.canonicalize().unwrap().join("node_modules/.bin/tsc").display()));
        assert!(steps[1].starts_with("npx --no-install wasmloop-js build -o "), "{steps:?}");

        let py = tmp.path().join("py");
        std::fs::create_dir_all(&py).unwrap();
        std::fs::write(py.join("pyproject.toml"), "[project]\nname = \"greet-py\"\nversion = \"0.1.0\"\n").unwrap();
        let p = PluginCrate::locate(&py, "release").unwrap();
        assert_eq!((p.toolchain, p.package.as_str()), (Toolchain::Python, "greet-py"));
        let (_, args) = &p.commands()[0];
        assert_eq!(args[..4], ["-m", "wasmloop_sdk.build", "--src", "src"]);

        let err = PluginCrate::locate(tmp.path(), "release").unwrap_err().to_string();
        assert!(err.contains("no Cargo.toml, package.json or pyproject.toml"), "{err}");
    }
}
