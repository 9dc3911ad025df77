//! `wasmloop new <name> [--lang rust|ts|js|python]`: a plugin that builds, tests and runs out of
//! the box — exactly the plugin of docs/plugin-guide.md with its name (`tests/tests/guide.rs`
//! compares them file by file): the reconciler (Namespaces labelled `<name>=true` get a
//! ConfigMap), a unit test on the SDK's `FakeCache`, fixtures for it and `wasmloop reconcile`,
//! the admin's manifest with exactly the grants it needs. Rust is a crate on `guest-sdk`;
//! TypeScript and JavaScript an npm package on `sdk/js` (`@wasmloop/sdk`); Python a project on
//! `sdk/python` (`wasmloop_sdk`).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

#[derive(clap::Args, Debug)]
pub struct NewArgs {
    /// The plugin's name: 1-63 characters of a-z, 0-9 and '-', starting with a letter.
    name: String,
    /// Where to create the crate (default: ./<name>). Must not exist yet.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The language of the plugin.
    #[arg(long, value_enum, default_value = "rust")]
    lang: Lang,
    /// The wasmloop SDK for that language (the repository's `guest-sdk`, `sdk/js` or
    /// `sdk/python` directory). Default: the one next to the sources this binary was built from,
    /// if it is still there.
    #[arg(long)]
    sdk: Option<PathBuf>,
}

/// The languages `wasmloop new` writes a plugin in.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    Rust,
    /// TypeScript, compiled with tsc, built with QuickJS (componentize-qjs).
    Ts,
    /// JavaScript (ES modules), built with QuickJS (componentize-qjs).
    Js,
    /// Python, built with componentize-py.
    Python,
}

/// Files every language shares: the fixtures and the admin's manifest.
const SHARED: [(&str, &str); 2] = [
    ("fixtures/namespaces.yaml", include_str!("template/fixtures/namespaces.yaml.tmpl")),
    ("{{name}}.plugin.yaml", include_str!("template/plugin.yaml.tmpl")),
];

impl Lang {
    /// The template: (path in the plugin, contents with `{{name}}`, `{{type}}`, `{{sdk}}`).
    fn files(self) -> Vec<(&'static str, &'static str)> {
        let own: &[(&str, &str)] = match self {
            Lang::Rust => &[
                ("Cargo.toml", include_str!("template/Cargo.toml.tmpl")),
                (".cargo/config.toml", include_str!("template/cargo-config.toml.tmpl")),
                ("src/lib.rs", include_str!("template/src/lib.rs.tmpl")),
                ("src/tests.rs", include_str!("template/src/tests.rs.tmpl")),
            ],
            Lang::Ts => &[
                ("package.json", include_str!("template/ts/package.json.tmpl")),
                ("tsconfig.json", include_str!("template/ts/tsconfig.json.tmpl")),
                ("src/plugin.ts", include_str!("template/ts/src/plugin.ts.tmpl")),
                ("src/plugin.test.ts", include_str!("template/ts/src/plugin.test.ts.tmpl")),
            ],
            Lang::Js => &[
                ("package.json", include_str!("template/js/package.json.tmpl")),
                ("src/plugin.js", include_str!("template/js/src/plugin.js.tmpl")),
                ("test/plugin.test.js", include_str!("template/js/test/plugin.test.js.tmpl")),
            ],
            Lang::Python => &[
                ("pyproject.toml", include_str!("template/python/pyproject.toml.tmpl")),
                ("requirements-dev.txt", include_str!("template/python/requirements-dev.txt.tmpl")),
                ("src/plugin.py", include_str!("template/python/src/plugin.py.tmpl")),
                ("tests/conftest.py", include_str!("template/python/tests/conftest.py.tmpl")),
                ("tests/test_plugin.py", include_str!("template/python/tests/test_plugin.py.tmpl")),
            ],
        };
        own.iter().chain(SHARED.iter()).copied().collect()
    }

    /// The SDK's directory in the repository, and a file that marks it.
    fn sdk_dir(self) -> (&'static str, &'static str) {
        match self {
            Lang::Rust => ("guest-sdk", "Cargo.toml"),
            Lang::Ts | Lang::Js => ("sdk/js", "package.json"),
            Lang::Python => ("sdk/python", "pyproject.toml"),
        }
    }

    /// Where the build puts the component, relative to the plugin.
    fn wasm(self, name: &str) -> String {
        match self {
            Lang::Rust => format!("target/wasm32-wasip2/release/{}.wasm", name.replace('-', "_")),
            Lang::Ts | Lang::Js | Lang::Python => "build/plugin.wasm".into(),
        }
    }

    /// The commands to test and build it.
    fn steps(self) -> &'static str {
        match self {
            Lang::Rust => "cargo test\n  cargo build --target wasm32-wasip2 --release",
            Lang::Ts | Lang::Js => "npm install\n  npm test\n  npm run build",
            Lang::Python => {
                "python3 -m venv .venv && .venv/bin/pip install -r requirements-dev.txt\n  .venv/bin/pytest\n  \
                 .venv/bin/python -m wasmloop_sdk.build -o build/plugin.wasm"
            }
        }
    }
}

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
    let (sdk_dir, marker) = args.lang.sdk_dir();
    let sdk = match &args.sdk {
        Some(p) => p.clone(),
        None => {
            let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(sdk_dir);
            if !built_from.join(marker).exists() {
                bail!("no SDK at {}: pass --sdk <path to wasmloop's {sdk_dir}>", built_from.display());
            }
            built_from
        }
    };
    let sdk = sdk.canonicalize().with_context(|| format!("--sdk {}", sdk.display()))?;
    let vars = [("{{name}}", name.clone()), ("{{type}}", type_name(name)), ("{{sdk}}", sdk.display().to_string())];
    let fill = |text: &str| vars.iter().fold(text.to_string(), |t, (k, v)| t.replace(k, v));
    for (path, text) in args.lang.files() {
        let path = dir.join(fill(path));
        std::fs::create_dir_all(path.parent().unwrap_or(&dir)).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(&path, fill(text)).with_context(|| format!("writing {}", path.display()))?;
    }
    // The commands of docs/plugin-guide.md, sections 3 to 5 (and 10 to 12 for other languages).
    let wasm = args.lang.wasm(name);
    println!(
        "created plugin {name} in {d}\n\n  cd {d}\n  {steps}\n  \
         wasmloop reconcile {wasm} --objects ./fixtures --key v1/Namespace/team-a\n  \
         wasmloop pack {wasm} --manifest {name}.plugin.yaml --namespace wasmloop --rbac > {name}-plugin.yaml\n  \
         kubectl apply --server-side -f {name}-plugin.yaml",
        d = dir.display(),
        steps = args.lang.steps(),
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
            let args = NewArgs { name: bad.into(), dir: Some(tmp.path().join("p")), lang: Lang::Rust, sdk: Some(tmp.path().into()) };
            assert!(run(args).unwrap_err().to_string().contains("plugin name"), "{bad:?}");
        }
        let args = NewArgs { name: "ok".into(), dir: Some(tmp.path().into()), lang: Lang::Rust, sdk: Some(tmp.path().into()) };
        assert!(run(args).unwrap_err().to_string().contains("already exists"));
        assert!(!tmp.path().join("p").exists());
    }

    #[test]
    fn every_language_gets_its_files_with_the_name_filled_in() {
        let tmp = tempfile::tempdir().unwrap();
        for (lang, expect) in [
            (Lang::Rust, vec!["Cargo.toml", ".cargo/config.toml", "src/lib.rs", "src/tests.rs"]),
            (Lang::Ts, vec!["package.json", "tsconfig.json", "src/plugin.ts", "src/plugin.test.ts"]),
            (Lang::Js, vec!["package.json", "src/plugin.js", "test/plugin.test.js"]),
            (Lang::Python, vec!["pyproject.toml", "requirements-dev.txt", "src/plugin.py", "tests/test_plugin.py"]),
        ] {
            let dir = tmp.path().join(format!("{lang:?}"));
            let args = NewArgs { name: "greet-me".into(), dir: Some(dir.clone()), lang, sdk: Some(tmp.path().into()) };
            run(args).unwrap();
            for f in expect.iter().chain(&["fixtures/namespaces.yaml", "greet-me.plugin.yaml"]) {
                let text = std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("{lang:?} {f}: {e}"));
                assert!(!text.contains("{{"), "{lang:?} {f} has an unfilled placeholder");
            }
            let main = std::fs::read_to_string(dir.join(expect[expect.len() - 2])).unwrap();
            assert!(main.contains("greet-me") || lang == Lang::Rust, "{lang:?}: {main}");
        }
        let py = std::fs::read_to_string(tmp.path().join("Python/src/plugin.py")).unwrap();
        assert!(py.contains("class GreetMe:") && py.contains("reconciler = GreetMe()"), "{py}");
    }
}
