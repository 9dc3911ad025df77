//! The conformance corpus: cases of every rule a plugin is judged by (label selectors, action
//! targets and names, children's owner, merge and JSON patches, preconditions, event → key
//! mappings), as JSON files under `model/conformance/`, one per rule family. The inputs are
//! listed in [`cases`]; the expected results are what this crate computes ([`expect`]), written
//! by `WASMLOOP_BLESS=1 cargo test -p wasmloop-model conformance` and checked against the files
//! otherwise, so the corpus cannot drift from the model. The host and the test fakes of every
//! language (Rust, JavaScript, Python) run each case and fail on any disagreement, naming it.
//!
//! A case file is `{"rule": …, "cases": [{"name": …, "input": {…}, "expect": {…}}]}`. An error
//! is expected as `{"error": {"kind": …}}` plus where it is (`at`, `field` or `index`), never
//! the message: messages may differ between languages, the rule may not.

use std::path::PathBuf;

use serde_json::Value;

pub mod cases;
pub mod expect;

/// Where the corpus files are.
pub fn dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/conformance"))
}

/// One rule family: its file, what it pins, its inputs and how the model computes a result.
pub struct Family {
    /// The file's stem under [`dir`]: `selectors` is `selectors.json`.
    pub name: &'static str,
    /// What the family pins, written into the file.
    pub rule: &'static str,
    /// The cases' names and inputs.
    pub cases: fn() -> Vec<(&'static str, Value)>,
    /// The expected result of one input, by the model's own code.
    pub expect: fn(&Value) -> Value,
}

/// Every family.
pub fn families() -> Vec<Family> {
    vec![
        Family {
            name: "selectors",
            rule: "Label selectors: what parses (else the error kind: operator, syntax, key, value; `at` the offending key or value) and which label sets match.",
            cases: cases::selectors,
            expect: expect::selector,
        },
        Family {
            name: "index_paths",
            rule: "Declared index paths: what parses (else the error kind: empty, key, segment) and the values a path gives for an object, sorted and distinct.",
            cases: cases::index_paths,
            expect: expect::index_path,
        },
        Family {
            name: "targets",
            rule: "What an action targets: apiVersion, kind, namespace, name or generateName (create only), checked as request-path segments; with `namespaced`, the scope from discovery too.",
            cases: cases::targets,
            expect: expect::target,
        },
        Family {
            name: "children",
            rule: "A child given its owner: in the owner's namespace (another is refused), one controller (another is refused; the same uid is no change).",
            cases: cases::children,
            expect: expect::child,
        },
        Family {
            name: "merge_patches",
            rule: "JSON merge patches (RFC 7386): an object, merged recursively, null removes.",
            cases: cases::merge_patches,
            expect: expect::merge_patch,
        },
        Family {
            name: "json_patches",
            rule: "JSON patches (RFC 6902): add, remove, replace and test only (move and copy are refused), paths of at most 128 segments, all or nothing; errors name the operation's index.",
            cases: cases::json_patches,
            expect: expect::json_patch,
        },
        Family {
            name: "preconditions",
            rule: "A patch's or delete's preconditions hold when uid and resourceVersion, where given and not empty, are the object's.",
            cases: cases::preconditions,
            expect: expect::preconditions,
        },
        Family {
            name: "mappings",
            rule: "Event -> key mappings: the keys of the reconciled kind an event on a related object queues (owner, label, same-name, namespace, index), sorted.",
            cases: cases::mappings,
            expect: expect::mapping,
        },
    ]
}

/// One case as read from its file.
#[derive(Debug, Clone)]
pub struct Case {
    /// Its name, unique in its file.
    pub name: String,
    /// What the rule is applied to.
    pub input: Value,
    /// What the model computes.
    pub expect: Value,
}

/// The file text of `family` as the model computes it (pretty JSON, one trailing newline).
pub fn render(family: &Family) -> String {
    let cases: Vec<Value> = (family.cases)()
        .into_iter()
        .map(|(name, input)| {
            let expect = (family.expect)(&input);
            serde_json::json!({"name": name, "input": input, "expect": expect})
        })
        .collect();
    let file = serde_json::json!({"rule": family.rule, "cases": cases});
    let mut text = serde_json::to_string_pretty(&file).expect("JSON values print");
    text.push('\n');
    text
}

/// The cases of family `name`, read from its file; panics if it is missing or malformed.
pub fn load(name: &str) -> Vec<Case> {
    let path = dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let cases = file.get("cases").and_then(Value::as_array).unwrap_or_else(|| panic!("{}: no `cases` list", path.display()));
    cases
        .iter()
        .map(|c| Case {
            name: c.get("name").and_then(Value::as_str).unwrap_or_else(|| panic!("{}: a case without a name", path.display())).to_owned(),
            input: c.get("input").cloned().unwrap_or(Value::Null),
            expect: c.get("expect").cloned().unwrap_or(Value::Null),
        })
        .collect()
}

/// Run every case of family `name` through `run` (a runner's own code, giving a result in the
/// corpus's form) and panic listing each case whose result differs from the expected one.
pub fn check(name: &str, mut run: impl FnMut(&Case) -> Value) {
    let cases = load(name);
    assert!(!cases.is_empty(), "{name}: no cases");
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            let got = run(case);
            (got != case.expect).then(|| format!("  {name}/{}: expected {}, got {}", case.name, case.expect, got))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} conformance cases disagree with model/conformance/{name}.json:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The files are what the model computes; `WASMLOOP_BLESS=1` rewrites them.
    #[test]
    fn the_corpus_is_what_the_model_computes() {
        let bless = std::env::var("WASMLOOP_BLESS").is_ok_and(|v| v == "1");
        let mut stale = Vec::new();
        for family in families() {
            let want = render(&family);
            let path = dir().join(format!("{}.json", family.name));
            if bless {
                std::fs::create_dir_all(dir()).unwrap();
                std::fs::write(&path, &want).unwrap();
            } else if std::fs::read_to_string(&path).ok().as_deref() != Some(want.as_str()) {
                stale.push(path.display().to_string());
            }
        }
        assert!(
            stale.is_empty(),
            "the corpus differs from what the model computes (rerun with WASMLOOP_BLESS=1 and review the diff): {stale:?}"
        );
    }

    /// Case names are unique in their family, so a failure names one case.
    #[test]
    fn case_names_are_unique() {
        for family in families() {
            let mut names: Vec<_> = (family.cases)().into_iter().map(|(n, _)| n).collect();
            let count = names.len();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), count, "{}: duplicate case names", family.name);
        }
    }
}
