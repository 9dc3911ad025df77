//! The two controllers the live benchmarks start and stop: the wasmloop host binary
//! (`wasmloop run`) and kube-controller-manager (through `scripts/control-plane.sh kcm`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::kube_util::{alive, free_port, http_ok, sigterm};

/// A running `wasmloop run`.
pub struct HostProcess {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
}

/// The host under test, the plugin it runs and where its logs go: the arguments every section
/// that starts `wasmloop run` shares (`#[command(flatten)]`).
#[derive(clap::Args, Debug, Clone)]
pub struct HostUnderTest {
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// The wasmloop binary (`wasmloop run`).
    #[arg(long)]
    pub host_bin: PathBuf,
    /// The replicaset plugin component.
    #[arg(long)]
    pub plugin: PathBuf,
    /// Its admin manifest.
    #[arg(long)]
    pub manifest: PathBuf,
    /// Logs and the precompiled-plugin directory go here.
    #[arg(long)]
    pub work_dir: PathBuf,
}

/// Where kube-controller-manager comes from: the project's control-plane script and the
/// running control plane it joins.
#[derive(clap::Args, Debug, Clone)]
pub struct PeerControlPlane {
    /// `scripts/control-plane.sh` (starts and stops kube-controller-manager).
    #[arg(long)]
    pub control_plane_script: PathBuf,
    /// The running control plane's directory.
    #[arg(long)]
    pub control_plane_dir: PathBuf,
}

/// How to start the host.
pub struct HostArgs<'a> {
    pub bin: &'a Path,
    pub kubeconfig: &'a Path,
    pub plugin_namespace: &'a str,
    pub precompiled_dir: &'a Path,
    pub log: PathBuf,
    /// More `wasmloop run` flags (e.g. `--shard-mode plugin --identity r1`).
    pub extra: &'a [String],
}

impl HostProcess {
    /// Start the host and wait until `/readyz` answers 200: the plugin ConfigMaps present at
    /// start are loaded and their controllers' informers have synced.
    pub async fn start(args: HostArgs<'_>, ready_timeout: Duration) -> Result<Self> {
        let port = free_port()?;
        let log = std::fs::File::create(&args.log).with_context(|| format!("creating {}", args.log.display()))?;
        let child = Command::new(args.bin)
            .arg("run")
            .arg("--kubeconfig")
            .arg(args.kubeconfig)
            .arg("--plugin-namespace")
            .arg(args.plugin_namespace)
            .arg("--precompiled-dir")
            .arg(args.precompiled_dir)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .args(args.extra)
            .env("RUST_LOG", "warn,wasmloop=info")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", args.bin.display()))?;
        let mut host = Self { child, port, log: args.log };
        let deadline = Instant::now() + ready_timeout;
        loop {
            if let Some(status) = host.child.try_wait()? {
                bail!("the host exited ({status}) before it was ready; log: {}\n{}", host.log.display(), tail(&host.log, 20));
            }
            if http_ok(port, "/readyz") {
                return Ok(host);
            }
            if Instant::now() > deadline {
                let _ = host.child.kill();
                bail!("the host was not ready after {ready_timeout:?}; log: {}\n{}", host.log.display(), tail(&host.log, 20));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Fail if the process has exited.
    pub fn check_running(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("the host exited ({status}); log: {}\n{}", self.log.display(), tail(&self.log, 20));
        }
        Ok(())
    }

    /// SIGKILL (`kill -9`), and reap the process.
    pub fn kill(&mut self) -> Result<()> {
        self.child.kill().context("killing the host")?;
        self.child.wait().context("reaping the host")?;
        Ok(())
    }

    /// SIGTERM, then SIGKILL after 30 s.
    pub async fn stop(mut self) -> Result<()> {
        if self.child.try_wait()?.is_some() {
            return Ok(());
        }
        sigterm(self.child.id())?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!("the host ignored SIGTERM for 30 s and was killed");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A running kube-controller-manager, started in a control-plane directory.
pub struct Kcm {
    script: PathBuf,
    dir: PathBuf,
    pid: u32,
}

impl Kcm {
    /// `control-plane.sh kcm DIR ARGS...`, then wait for its ReplicaSet controller's caches
    /// ("Caches are synced for ReplicaSet" in its log).
    pub async fn start(script: &Path, dir: &Path, args: &[String], ready_timeout: Duration) -> Result<Self> {
        let st = Command::new(script).arg("kcm").arg(dir).args(args).stdout(Stdio::null()).status()?;
        anyhow::ensure!(st.success(), "{} kcm failed", script.display());
        let pid: u32 = std::fs::read_to_string(dir.join("kcm.pid")).context("reading kcm.pid")?.trim().parse()?;
        let kcm = Self { script: script.to_path_buf(), dir: dir.to_path_buf(), pid };
        let log = dir.join("kcm.log");
        let deadline = Instant::now() + ready_timeout;
        loop {
            if !alive(pid) {
                bail!("kube-controller-manager exited during start:\n{}", tail(&log, 20));
            }
            if std::fs::read_to_string(&log).unwrap_or_default().contains("Caches are synced for ReplicaSet") {
                return Ok(kcm);
            }
            if Instant::now() > deadline {
                bail!("kube-controller-manager's ReplicaSet caches did not sync in {ready_timeout:?}:\n{}", tail(&log, 20));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn check_running(&self) -> Result<()> {
        anyhow::ensure!(alive(self.pid), "kube-controller-manager exited:\n{}", tail(&self.dir.join("kcm.log"), 20));
        Ok(())
    }

    /// `control-plane.sh stop-kcm DIR`; keeps its log as `keep_log`.
    pub fn stop(self, keep_log: &Path) -> Result<()> {
        let st = Command::new(&self.script).arg("stop-kcm").arg(&self.dir).status()?;
        anyhow::ensure!(st.success(), "stop-kcm failed");
        let _ = std::fs::copy(self.dir.join("kcm.log"), keep_log);
        Ok(())
    }
}

/// The flags kube-controller-manager runs with in the races: only `controllers` (comma-separated),
/// the client budget the plugins' manifests give them (`api: {qps: 1000, burst: 1000}`), no
/// leader election.
pub fn kcm_race_flags(controllers: &str) -> Vec<String> {
    [format!("--controllers={controllers}"), "--kube-api-qps=1000".into(), "--kube-api-burst=1000".into(), "--leader-elect=false".into()]
        .into()
}

/// Run `measure(pid)` against kube-controller-manager started in `peer`'s control plane with
/// `flags` (a second after its caches synced), then stop it, keeping its log as `keep_log`.
/// Returns its start → ready seconds and the measurement; an error if it exited meanwhile.
pub async fn with_kcm<T>(
    peer: &PeerControlPlane,
    flags: &[String],
    keep_log: &Path,
    measure: impl AsyncFnOnce(u32) -> Result<T>,
) -> Result<(f64, T)> {
    let started = Instant::now();
    let kcm = Kcm::start(&peer.control_plane_script, &peer.control_plane_dir, flags, Duration::from_secs(60)).await?;
    let ready_s = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let measured = measure(kcm.pid()).await;
    let alive = kcm.check_running();
    kcm.stop(keep_log)?;
    alive?;
    Ok((ready_s, measured?))
}

/// Run `measure(pid, metrics port)` against the host started with `args` (a second after it is
/// ready), then stop it. Returns its start → ready seconds and the measurement; an error if it
/// exited meanwhile.
pub async fn with_host<T>(args: HostArgs<'_>, measure: impl AsyncFnOnce(u32, u16) -> Result<T>) -> Result<(f64, T)> {
    let started = Instant::now();
    let mut host = HostProcess::start(args, Duration::from_secs(120)).await?;
    let ready_s = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let measured = measure(host.pid(), host.port).await;
    let alive = host.check_running();
    host.stop().await?;
    alive?;
    Ok((ready_s, measured?))
}

/// The API server's and etcd's process ids in control-plane directory `dir`.
pub fn control_plane_pids(dir: &Path) -> Result<[u32; 2]> {
    let pid_of = |f: &str| -> Result<u32> {
        let path = dir.join(f);
        Ok(std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?.trim().parse()?)
    };
    Ok([pid_of("apiserver.pid")?, pid_of("etcd.pid")?])
}

/// The last `n` lines of a file (for error messages).
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
