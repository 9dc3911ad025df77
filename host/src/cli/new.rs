//! `wasmloop new <name>`: a plugin crate that builds, tests and runs out of the box — exactly the
//! crate of docs/plugin-guide.md with its name (`tests/tests/guide.rs` compares them file by file):
//! the reconciler (Namespaces labelled `<name>=true` get a ConfigMap), a native test on the SDK's
//! `FakeCache`, fixtures for it and `wasmloop reconcile`, the admin's manifest with exactly the
//! grants it needs, and the RBAC that lets the host's ServiceAccount carry them out.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

#[derive(clap::Args, Debug)]
pub struct NewArgs {
    /// The plugin's name: 1-63 characters of a-z, 0-9 and '-', starting with a letter.
    name: String,
    /// Where to create the crate (default: ./<name>). Must not exist yet.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The wasmloop SDK (the repository's `guest-sdk` directory). Default: the one this binary
    /// was built from, if it is still there.
    #[arg(long)]
    sdk: Option<PathBuf>,
}

/// The template: (path in the crate, contents with `{{name}}`, `{{type}}`, `{{sdk}}`).
const FILES: [(&str, &str); 5] = [
    ("Cargo.toml", include_str!("template/Cargo.toml.tmpl")),
    ("src/lib.rs", include_str!("template/src/lib.rs.tmpl")),
    ("src/tests.rs", include_str!("template/src/tests.rs.tmpl")),
    ("fixtures/namespaces.yaml", include_str!("template/fixtures/namespaces.yaml.tmpl")),
    ("{{name}}.plugin.yaml", include_str!("template/plugin.yaml.tmpl")),
];

pub fn run(args: NewArgs) -> anyhow::Result<()> {
    let name = &args.name;
    // A plugin name (a DNS label) that is also a crate name (starts with a letter).
    let valid = wasmloop_model::name::dns_label(name, wasmloop_model::name::DNS_LABEL_MAX).is_ok()
        && name.starts_with(|c: char| c.is_ascii_lowercase());
    if !valid {
        bail!("plugin name {name:?}: use 1-63 characters of a-z, 0-9 and '-', starting with a letter and not ending with '-'");
    }
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(name));
    if dir.exists() {
        bail!("{} already exists: choose another --dir", dir.display());
    }
    let sdk = match &args.sdk {
        Some(p) => p.clone(),
        None => {
            let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk");
            if !built_from.join("Cargo.toml").exists() {
                bail!("no SDK at {}: pass --sdk <path to wasmloop's guest-sdk>", built_from.display());
            }
            built_from
        }
    };
    let sdk = sdk.canonicalize().with_context(|| format!("--sdk {}", sdk.display()))?;
    let vars = [("{{name}}", name.clone()), ("{{type}}", type_name(name)), ("{{sdk}}", sdk.display().to_string())];
    let fill = |text: &str| vars.iter().fold(text.to_string(), |t, (k, v)| t.replace(k, v));
    for (path, text) in FILES {
        let path = dir.join(fill(path));
        std::fs::create_dir_all(path.parent().unwrap_or(&dir)).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(&path, fill(text)).with_context(|| format!("writing {}", path.display()))?;
    }
    // The commands of docs/plugin-guide.md, sections 3 to 5.
    let wasm = format!("target/wasm32-wasip2/release/{}.wasm", name.replace('-', "_"));
    println!(
        "created plugin {name} in {d}\n\n  cd {d}\n  cargo test\n  cargo build --target wasm32-wasip2 --release\n  \
         wasmloop reconcile {wasm} --objects ./fixtures --key v1/Namespace/team-a\n  \
         wasmloop pack {wasm} --manifest {name}.plugin.yaml --namespace wasmloop --rbac > {name}-plugin.yaml\n  \
         kubectl apply --server-side -f {name}-plugin.yaml",
        d = dir.display()
    );
    Ok(())
}

/// `my-plugin` → `MyPlugin`.
fn type_name(name: &str) -> String {
    name.split('-').filter(|p| !p.is_empty()).map(|p| p[..1].to_ascii_uppercase() + &p[1..]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_are_camel_case() {
        assert_eq!(type_name("welcome"), "Welcome");
        assert_eq!(type_name("my-plugin-2"), "MyPlugin2");
    }

    #[test]
    fn bad_names_and_existing_dirs_are_refused_before_writing() {
        let tmp = tempfile::tempdir().unwrap();
        for bad in ["", "Upper", "1st", "trailing-", "under_score", &"x".repeat(64)] {
            let args = NewArgs { name: bad.into(), dir: Some(tmp.path().join("p")), sdk: Some(tmp.path().into()) };
            assert!(run(args).unwrap_err().to_string().contains("plugin name"), "{bad:?}");
        }
        let args = NewArgs { name: "ok".into(), dir: Some(tmp.path().into()), sdk: Some(tmp.path().into()) };
        assert!(run(args).unwrap_err().to_string().contains("already exists"));
        assert!(!tmp.path().join("p").exists());
    }
}
