//! The offline tools are bounded, and the binary runs under an address-space limit (issue #46,
//! item 6). Runs the built `wasmloop` binary as a child process; no cluster needed.
//!
//! - A decompression bomb handed to `wasmloop replay` (made here: 32 KiB of zstd that inflate to
//!   1 GiB) is refused naming the file, the limit and the flag that raises it, and the process's
//!   peak RSS (its `ru_maxrss`, from `wait4`) stays far below what inflating it would take; the
//!   same under an address-space limit of 1 GiB, where inflating it could not even be tried.
//!
//! Limits are given to `prlimit` in bytes: util-linux's `prlimit --as=16G` sets 16 *bytes* (it
//! drops the suffix), under which no program can even be executed (the kernel kills the exec
//! with SIGSEGV: `prlimit --as=16G true` too), which is what made the binary look as if it
//! crashed under any `RLIMIT_AS`.
//! - Under `prlimit --as` of a modest size, `--version`, `--help`, `pack`, `inspect`,
//!   `reconcile --record` and `replay` of what it recorded work (a plugin from
//!   `WASMLOOP_PLUGIN_DIR`, built by scripts/build-plugins.sh); `run` with the default instance
//!   pool refuses to start and says what address space it needs, why, and which flags size it.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};
use wasmloop_tests::cluster::host_binary;
use wasmloop_tests::plugin_path;

/// What a finished child did, and its peak resident set.
struct Finished {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    max_rss_kib: i64,
}

/// Run `cmd` to the end and reap it with `wait4`, which returns the child's own peak RSS.
fn run_measured(mut cmd: Command) -> Result<Finished> {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().context("spawning")?;
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut stdout = String::new();
    out.read_to_string(&mut stdout)?;
    let stderr = stderr.join().unwrap();
    let pid = i32::try_from(child.id())?;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value; wait4 fills it and the status for our child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not yet reaped (Child::wait was never called).
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    ensure!(reaped == pid, "wait4: {}", std::io::Error::last_os_error());
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    std::mem::forget(child); // reaped above
    Ok(Finished { code, stdout, stderr, max_rss_kib: usage.ru_maxrss })
}

const GI: u64 = 1 << 30;

/// `wasmloop <args>` under `prlimit --as=<limit bytes>` (no limit: `None`).
fn wasmloop(limit: Option<u64>, args: &[&str]) -> Result<Command> {
    let bin = host_binary()?;
    let mut cmd = match limit {
        Some(l) => {
            let mut c = Command::new("prlimit");
            c.arg(format!("--as={l}")).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    cmd.args(args).env("RUST_LOG", "warn");
    Ok(cmd)
}

/// A recording's first bytes, then `spaces` MiB of JSON whitespace, as one streamed zstd frame
/// (no declared size: only the reader's cap can stop it).
fn bomb(path: &Path, spaces_mib: usize) -> Result<u64> {
    let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 1)?;
    enc.write_all(br#"{"format": 1, "plugin": "podset""#)?;
    let chunk = vec![b' '; 1 << 20];
    for _ in 0..spaces_mib {
        enc.write_all(&chunk)?;
    }
    let bytes = enc.finish()?;
    std::fs::write(path, &bytes)?;
    Ok(bytes.len() as u64)
}

#[test]
fn replay_refuses_a_decompression_bomb_in_bounded_memory() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("bomb.json.zst");
    let size = bomb(&path, 1024)?;
    ensure!(size < 64 << 10, "the bomb is {size} bytes");
    let p = path.to_str().unwrap();
    // No plugin is needed: the recording is read first.
    for limit in [None, Some(GI)] {
        let done = run_measured(wasmloop(limit, &["replay", p, "--plugin", "/nonexistent.wasm"])?)?;
        println!(
            "replay of a {size}-byte bomb (1 GiB inflated), RLIMIT_AS {limit:?}: exit {:?}, peak RSS {} KiB",
            done.code, done.max_rss_kib
        );
        ensure!(done.code == Some(2), "exit {:?}; stderr: {}", done.code, done.stderr);
        for needle in [p, "decompresses to more than 67108864 bytes", "--max-recording-size 64Mi", "raise it"] {
            ensure!(done.stderr.contains(needle), "{needle:?} not in: {}", done.stderr);
        }
        // The cap is 64 MiB of JSON; inflating the bomb would take 1 GiB.
        ensure!(done.max_rss_kib < 256 * 1024, "peak RSS {} KiB", done.max_rss_kib);
    }
    // Raised, the same file is read further (and still refused at the new cap).
    let done = run_measured(wasmloop(None, &["replay", p, "--plugin", "/nonexistent.wasm", "--max-recording-size", "16Mi"])?)?;
    ensure!(done.stderr.contains("more than 16777216 bytes") && done.stderr.contains("--max-recording-size 16Mi"), "{}", done.stderr);
    // A file over the cap is refused by its size, before it is read.
    let big = dir.path().join("big.json");
    std::fs::write(&big, vec![b' '; 2 << 20])?;
    let done = run_measured(wasmloop(None, &["replay", big.to_str().unwrap(), "--plugin", "/x.wasm", "--max-recording-size", "1Mi"])?)?;
    ensure!(done.code == Some(2), "{}", done.stderr);
    ensure!(done.stderr.contains("the file is 2097152 bytes, more than 1048576 bytes"), "{}", done.stderr);
    Ok(())
}

/// A modest address-space limit: far below what the host's instance pool reserves (about 1 TiB).
const MODEST: u64 = 4 * GI;

#[test]
fn prlimit_takes_bytes_and_a_suffix_is_dropped() -> Result<()> {
    // What the report of a crash under any RLIMIT_AS came from: 16 bytes of address space.
    let mut cmd = Command::new("prlimit");
    cmd.args(["--as=16G", "true"]);
    let done = run_measured(cmd)?;
    ensure!(done.code.is_none(), "`prlimit --as=16G true` exited {:?}: the limit was not 16 bytes?", done.code);
    let done = run_measured(wasmloop(Some(16 * GI), &["--version"])?)?;
    ensure!(done.code == Some(0) && done.stdout.starts_with("wasmloop "), "{:?} {}", done.code, done.stderr);
    Ok(())
}

#[test]
fn the_offline_commands_run_under_an_address_space_limit() -> Result<()> {
    for args in [&["--version"][..], &["--help"], &["run", "--help"]] {
        let done = run_measured(wasmloop(Some(MODEST), args)?)?;
        ensure!(done.code == Some(0), "{args:?} under RLIMIT_AS {MODEST}: exit {:?}, {}", done.code, done.stderr);
        ensure!(!done.stdout.is_empty());
    }
    let plugin = plugin_path("podset")?;
    let plugin = plugin.to_str().unwrap();
    let dir = tempfile::tempdir()?;
    let cache = dir.path().join("precompiled");
    let cache = cache.to_str().unwrap();
    let inspect = run_measured(wasmloop(Some(MODEST), &["inspect", plugin, "--precompiled-dir", cache])?)?;
    ensure!(inspect.code == Some(0), "inspect: exit {:?}: {}", inspect.code, inspect.stderr);
    ensure!(inspect.stdout.contains("podset"), "{}", inspect.stdout);
    let pack = run_measured(wasmloop(Some(MODEST), &["pack", plugin, "--namespace", "wasmloop"])?)?;
    ensure!(pack.code == Some(0) && pack.stdout.contains("kind: ConfigMap"), "pack: exit {:?}: {}", pack.code, pack.stderr);
    let objects = dir.path().join("podset.yaml");
    std::fs::write(
        &objects,
        "apiVersion: wasmloop.dev/v1alpha1\nkind: PodSet\nmetadata: {name: web, namespace: shop}\nspec: {replicas: 2, template: {spec: {containers: [{name: c, image: x}]}}}\n",
    )?;
    let recording = dir.path().join("web.json.zst");
    let rec = recording.to_str().unwrap();
    let reconcile = run_measured(wasmloop(
        Some(MODEST),
        &[
            "reconcile",
            plugin,
            "--objects",
            objects.to_str().unwrap(),
            "--key",
            "wasmloop.dev/v1alpha1/PodSet/shop/web",
            "--record",
            rec,
            "--precompiled-dir",
            cache,
        ],
    )?)?;
    ensure!(reconcile.code == Some(0), "reconcile: exit {:?}: {}", reconcile.code, reconcile.stderr);
    ensure!(reconcile.stdout.contains("create"), "{}", reconcile.stdout);
    let replay = run_measured(wasmloop(Some(MODEST), &["replay", rec, "--plugin", plugin, "--precompiled-dir", cache])?)?;
    ensure!(
        replay.code == Some(0) && replay.stdout.contains("result: same"),
        "replay: exit {:?}: {}\n{}",
        replay.code,
        replay.stdout,
        replay.stderr
    );
    println!("under RLIMIT_AS {MODEST}: inspect, pack, reconcile --record and replay ran; replay peak RSS {} KiB", replay.max_rss_kib);
    Ok(())
}

#[test]
fn run_says_what_address_space_its_instance_pool_needs() -> Result<()> {
    // Refused before anything else (no cluster is reached: the kubeconfig does not exist).
    let done = run_measured(wasmloop(Some(MODEST), &["run", "--kubeconfig", "/nonexistent/kubeconfig"])?)?;
    ensure!(done.code == Some(1), "exit {:?}: {}", done.code, done.stderr);
    for needle in ["address space", "RLIMIT_AS", "--instance-pool", "--plugin-memory-max"] {
        ensure!(done.stderr.contains(needle), "{needle:?} not in: {}", done.stderr);
    }
    Ok(())
}

/// The host itself under an address-space limit, its pool sized by the flags the refusal names:
/// it loads the podset plugin and a PodSet converges. Prints the address space it peaked at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_works_under_an_address_space_limit_with_a_pool_that_fits() -> Result<()> {
    use std::collections::BTreeMap;
    use wasmloop_tests::cluster::{
        DEPLOY_NS, DEPLOY_SA, bind_host_role, converged, create_podset, deployed_and_served, install_podset_plugin,
    };
    wasmloop_tests::init_tracing();
    let (admin, _) = wasmloop_tests::client().await?;
    deployed_and_served(&admin).await?;
    let ns = wasmloop_tests::TestNamespace::create(&admin, "rlimit-as").await?;
    let dir = tempfile::tempdir()?;
    let plugins = install_podset_plugin(&admin, &ns.name).await?;
    bind_host_role(&admin, &plugins, DEPLOY_NS, DEPLOY_SA).await?;
    let kc = wasmloop_tests::sa_kubeconfig(&admin, DEPLOY_NS, DEPLOY_SA, dir.path()).await?;
    let limit = 8 * GI;
    let log = dir.path().join("host.log");
    let mut host = Command::new("prlimit")
        .arg(format!("--as={limit}"))
        .arg(host_binary()?)
        .arg("run")
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["--plugin-namespace", &plugins, "--listen", "127.0.0.1:0", "--instance-pool", "16", "--plugin-memory-max", "128Mi"])
        .arg("--precompiled-dir")
        .arg(dir.path().join("precompiled"))
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()?;
    create_podset(&admin, &ns.name, "capped", 3).await?;
    let result = converged(&admin, &ns.name, &BTreeMap::from([("capped".to_string(), 3)])).await;
    // prlimit execs the host: the child's pid is the host's.
    let status = std::fs::read_to_string(format!("/proc/{}/status", host.id())).unwrap_or_default();
    let peak = status.lines().find(|l| l.starts_with("VmPeak:")).unwrap_or("VmPeak: ?").to_string();
    let exited = host.try_wait()?;
    let _ = host.kill();
    let _ = host.wait();
    let text = std::fs::read_to_string(&log)?;
    result.with_context(|| format!("host under RLIMIT_AS {limit} (exited: {exited:?}); log:\n{text}"))?;
    println!("host under RLIMIT_AS 8 GiB with --instance-pool 16 --plugin-memory-max 128Mi: converged; {peak}");
    ns.cleanup().await
}
