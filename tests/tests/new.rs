//! `wasmloop new` creates a plugin crate that works as created: outside the workspace, its
//! native tests pass, its component builds, and `wasmloop reconcile` with the generated fixtures
//! and manifest (its grants checked as the host checks them) creates the ConfigMap; `wasmloop
//! pack` packs it with that manifest, derives one without it, and refuses one missing a read.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, ensure};
use wasmloop_tests::workspace_root;

fn run(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    ensure!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

#[test]
fn a_new_plugin_tests_builds_and_reconciles_out_of_the_box() -> Result<()> {
    let root = workspace_root();
    let wasmloop = root.join("target/debug/wasmloop");
    ensure!(wasmloop.exists(), "{} is not built (cargo build -p wasmloop)", wasmloop.display());
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("hello-world");
    run(Command::new(&wasmloop).args(["new", "hello-world", "--dir"]).arg(&dir), "wasmloop new")?;
    // Shares compiled dependencies between runs; the crate itself stays outside the workspace.
    let target = root.join("target/new-plugin");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let cargo_in = |dir: &Path| {
        let mut c = Command::new(&cargo);
        c.current_dir(dir).env("CARGO_TARGET_DIR", &target).env_remove("RUSTFLAGS");
        c
    };
    let tests = run(cargo_in(&dir).arg("test"), "cargo test in the new crate")?;
    ensure!(tests.contains("2 passed"), "the generated tests did not run:\n{tests}");
    run(cargo_in(&dir).args(["build", "--target", "wasm32-wasip2", "--release"]), "building the component")?;
    let wasm = target.join("wasm32-wasip2/release/hello_world.wasm");
    let out = run(
        Command::new(&wasmloop).current_dir(&dir).arg("reconcile").arg(&wasm).args([
            "--objects",
            "fixtures",
            "--key",
            "v1/Namespace/team-a",
            "--manifest",
            "hello-world.plugin.yaml",
        ]),
        "wasmloop reconcile",
    )?;
    ensure!(out.contains("action: create") && out.contains("message: Welcome to team-a!"), "unexpected outcome:\n{out}");
    // Packing: with the generated manifest; without one (reads derived from the plugin's
    // metadata, writes from --allow); and a manifest missing a declared read is refused.
    run(Command::new(&wasmloop).current_dir(&dir).arg("pack").arg(&wasm).args(["--manifest", "hello-world.plugin.yaml"]), "pack")?;
    let derived = Command::new(&wasmloop).current_dir(&dir).arg("pack").arg(&wasm).args(["--allow", "v1/ConfigMap=create"]).output()?;
    let (stdout, stderr) = (String::from_utf8_lossy(&derived.stdout), String::from_utf8_lossy(&derived.stderr));
    ensure!(derived.status.success(), "pack without --manifest failed:\n{stderr}");
    ensure!(
        stdout.contains(r#"verbs: ["read", "create"]"#) && stdout.contains(r#"kinds: ["v1/Namespace"]"#),
        "the derived manifest does not grant the declared reads and the allowed write:\n{stdout}"
    );
    std::fs::write(dir.join("reads-nothing.yaml"), "name: hello-world\ngrants: []\n")?;
    let refused = Command::new(&wasmloop).current_dir(&dir).arg("pack").arg(&wasm).args(["--manifest", "reads-nothing.yaml"]).output()?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    ensure!(!refused.status.success() && stderr.contains("would refuse") && stderr.contains("v1/Namespace"), "not refused:\n{stderr}");
    // A second `new` into the same place is refused, not merged.
    let again = Command::new(&wasmloop).args(["new", "hello-world", "--dir"]).arg(&dir).output()?;
    ensure!(!again.status.success() && String::from_utf8_lossy(&again.stderr).contains("already exists"));
    Ok(())
}
