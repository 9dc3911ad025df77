//! The container image that `scripts/image.sh` builds (an OCI image layout, no container engine),
//! read here without umoci: the layout is valid (every blob named by the sha256 of its content,
//! sizes as declared, the layer's diff_id that of the uncompressed tar), the config runs
//! `/usr/local/bin/wasmloop run` as a non-root numeric user, and the single layer holds exactly
//! one regular file, that binary: statically linked, stripped, and it runs.
//!
//! `./scripts/test.sh` builds the image first; alone: `./scripts/image.sh && cargo test -p
//! wasmloop-tests --test image`. `WASMLOOP_TEST_IMAGE` names another layout (default
//! `target/image/oci`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;
use wasmloop_tests::workspace_root;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const ENTRYPOINT: &str = "/usr/local/bin/wasmloop";

fn run(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    ensure!(out.status.success(), "{what} failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8(out.stdout)?)
}

/// `sha256sum` of a file, or of what `gzip -dc` makes of it.
fn sha256(path: &Path, gunzip: bool) -> Result<String> {
    let sum = if gunzip {
        let gz = Command::new("gzip").arg("-dc").arg(path).stdout(Stdio::piped()).spawn().context("running gzip -dc")?;
        run(Command::new("sha256sum").stdin(gz.stdout.context("gzip's stdout")?), "sha256sum")?
    } else {
        run(Command::new("sha256sum").arg(path), "sha256sum")?
    };
    Ok(sum.split_whitespace().next().context("sha256sum printed nothing")?.to_string())
}

/// The blob a descriptor points at, after checking its media type, digest and size.
fn blob(layout: &Path, descriptor: &Value, media_type: &str) -> Result<PathBuf> {
    ensure!(descriptor["mediaType"] == media_type, "expected a {media_type}, got {descriptor}");
    let digest = descriptor["digest"].as_str().context("descriptor without a digest")?;
    let hex = digest.strip_prefix("sha256:").with_context(|| format!("{digest} is not a sha256 digest"))?;
    ensure!(hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()), "malformed digest {digest}");
    let path = layout.join("blobs/sha256").join(hex);
    let size = std::fs::metadata(&path).with_context(|| format!("blob {digest} is missing"))?.len();
    ensure!(Some(size) == descriptor["size"].as_u64(), "blob {digest} has {size} bytes, the descriptor says {}", descriptor["size"]);
    ensure!(sha256(&path, false)? == hex, "blob {digest} does not hash to its digest");
    Ok(path)
}

fn json(path: &Path) -> Result<Value> {
    serde_json::from_slice(&std::fs::read(path)?).with_context(|| format!("parsing {}", path.display()))
}

fn mb(bytes: u64) -> String {
    format!("{bytes} bytes ({:.1} MB)", bytes as f64 / 1e6)
}

#[test]
fn the_image_is_a_valid_oci_layout_of_one_static_binary_run_as_non_root() -> Result<()> {
    let root = workspace_root();
    let layout = std::env::var_os("WASMLOOP_TEST_IMAGE").map_or_else(|| root.join("target/image/oci"), PathBuf::from);
    ensure!(layout.join("oci-layout").exists(), "no OCI layout at {} (build it: ./scripts/image.sh)", layout.display());

    // The layout, and the manifest tagged with this version.
    ensure!(json(&layout.join("oci-layout"))?["imageLayoutVersion"] == "1.0.0", "unexpected oci-layout");
    let index = json(&layout.join("index.json"))?;
    ensure!(index["schemaVersion"] == 2, "index.json: schemaVersion is not 2");
    let tagged: Vec<&Value> = index["manifests"]
        .as_array()
        .context("index.json has no manifests")?
        .iter()
        .filter(|m| m["annotations"]["org.opencontainers.image.ref.name"] == VERSION)
        .collect();
    let [descriptor] = tagged[..] else { bail!("index.json: {} manifests tagged {VERSION}, expected one", tagged.len()) };
    let manifest_blob = blob(&layout, descriptor, "application/vnd.oci.image.manifest.v1+json")?;
    let manifest = json(&manifest_blob)?;
    ensure!(manifest["schemaVersion"] == 2, "manifest: schemaVersion is not 2");
    let config = json(&blob(&layout, &manifest["config"], "application/vnd.oci.image.config.v1+json")?)?;
    let layers = manifest["layers"].as_array().context("manifest without layers")?;
    let [layer] = &layers[..] else { bail!("{} layers, expected one", layers.len()) };
    let layer = blob(&layout, layer, "application/vnd.oci.image.layer.v1.tar+gzip")?;
    let diff_ids = config["rootfs"]["diff_ids"].as_array().context("config without rootfs.diff_ids")?;
    ensure!(config["rootfs"]["type"] == "layers" && diff_ids.len() == 1, "config: rootfs is not one layer: {}", config["rootfs"]);
    ensure!(diff_ids[0] == format!("sha256:{}", sha256(&layer, true)?), "the layer's diff_id is not the sha256 of the uncompressed layer");

    // The config: what the Deployment (deploy/deployment.yaml: args [run], runAsUser 65532) expects.
    ensure!(config["os"] == "linux", "os: {}", config["os"]);
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    ensure!(config["architecture"] == arch, "architecture {}, expected {arch}", config["architecture"]);
    let c = &config["config"];
    ensure!(c["Entrypoint"] == serde_json::json!([ENTRYPOINT]), "entrypoint: {}", c["Entrypoint"]);
    ensure!(c["Cmd"] == serde_json::json!(["run"]), "cmd: {}", c["Cmd"]);
    let user = c["User"].as_str().context("config without a user (it would run as root)")?;
    for id in user.split(':') {
        let id: u32 = id.parse().with_context(|| format!("user {user:?} is not numeric (runAsNonRoot needs a numeric UID)"))?;
        ensure!(id != 0, "user {user:?} is root");
    }
    let env: Vec<&str> = c["Env"].as_array().context("config without Env")?.iter().filter_map(Value::as_str).collect();
    ensure!(env.contains(&"WASMLOOP_PRECOMPILED_DIR=/var/cache/wasmloop"), "env: {env:?}");
    ensure!(c["ExposedPorts"].get("8080/tcp").is_some(), "port 8080 is not exposed: {}", c["ExposedPorts"]);

    // The layer: directories, and exactly one regular file, the entrypoint.
    let listing = run(Command::new("tar").arg("--numeric-owner").arg("-tvzf").arg(&layer), "tar -tvzf (the layer)")?;
    let mut files = Vec::new();
    for line in listing.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [mode, owner, _size, _date, _time, name] = fields[..] else { bail!("unexpected tar listing line {line:?}") };
        match mode.as_bytes()[0] {
            b'd' => {}
            b'-' => files.push((mode, owner, name)),
            _ => bail!("the layer holds something other than directories and one file: {line}"),
        }
    }
    let [(mode, owner, name)] = files[..] else { bail!("the layer holds {} regular files, expected one:\n{listing}", files.len()) };
    ensure!(format!("/{}", name.trim_start_matches("./")) == ENTRYPOINT, "the layer's one file is {name}, not the entrypoint");
    ensure!(mode == "-rwxr-xr-x" && owner == "0/0", "{name}: mode {mode}, owner {owner}; expected -rwxr-xr-x 0/0");

    // The binary: static (no interpreter, no NEEDED library; a static-pie binary still has a
    // dynamic section, for its own relocations), stripped, and it runs.
    let tmp = tempfile::tempdir()?;
    run(Command::new("tar").arg("-xzf").arg(&layer).arg("-C").arg(tmp.path()).arg(name), "tar -xzf (the binary)")?;
    let binary = tmp.path().join(name);
    let headers = run(Command::new("readelf").args(["-lW"]).arg(&binary), "readelf -l")?;
    ensure!(!headers.contains("INTERP"), "the binary asks for a program interpreter (dynamically linked):\n{headers}");
    let dynamic = run(Command::new("readelf").args(["-dW"]).arg(&binary), "readelf -d")?;
    ensure!(!dynamic.contains("(NEEDED)"), "the binary needs shared libraries:\n{dynamic}");
    let sections = run(Command::new("readelf").args(["-SW"]).arg(&binary), "readelf -S")?;
    ensure!(!sections.contains(".symtab"), "the binary is not stripped");
    let version = run(Command::new(&binary).arg("--version"), "wasmloop --version (from the image)")?;
    ensure!(version.trim() == format!("wasmloop {VERSION}"), "--version printed {version:?}");
    let help = run(Command::new(&binary).arg("--help"), "wasmloop --help (from the image)")?;
    ensure!(help.contains("run"), "--help does not mention the run command:\n{help}");

    let image_size = std::fs::metadata(&manifest_blob)?.len()
        + manifest["config"]["size"].as_u64().unwrap_or(0)
        + manifest["layers"][0]["size"].as_u64().unwrap_or(0);
    println!(
        "image {}:{VERSION}: binary {}, image {} (manifest + config + gzip layer)",
        layout.display(),
        mb(std::fs::metadata(&binary)?.len()),
        mb(image_size)
    );
    Ok(())
}
