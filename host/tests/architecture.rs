//! The shape of `host/src` that docs/architecture.md promises, checked on the sources: no file
//! over 800 lines (a newcomer reads one in a sitting), and no import cycle between modules —
//! not even between two files of one folder. A module's own children are not counted as its
//! imports (a `mod.rs` declares and re-exports them); everything else a file names through
//! `crate::` or `super::` outside comments and its `mod tests` is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 800;

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `plugin::runtime` for `src/plugin/runtime.rs`, `plugin` for `src/plugin/mod.rs`.
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// The paths a file names with `crate::`/`super::`/`self::`, outside comments and tests.
fn named_paths(source: &str) -> Vec<(String, Vec<String>)> {
    let code = source.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
    let mut out = Vec::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        let bytes = line.as_bytes();
        for base in ["crate", "super", "self"] {
            let mut from = 0;
            while let Some(at) = line[from..].find(&format!("{base}::")).map(|i| i + from) {
                from = at + base.len();
                let word_start = at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_' || bytes[at - 1] == b':');
                if !word_start {
                    continue;
                }
                let rest = &line[at + base.len()..];
                let segs: Vec<String> = rest
                    .split("::")
                    .skip(1)
                    .map(|s| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>())
                    .take_while(|s| !s.is_empty())
                    .collect();
                out.push((base.to_owned(), segs));
            }
        }
    }
    out
}

/// The module graph of `root`: module → modules it imports.
fn graph(root: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    sources(root, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> = files.iter().map(|f| (module_of(root, f), f.clone())).collect();
    let resolve = |path: &[String]| (1..=path.len()).rev().map(|n| path[..n].to_vec()).find(|m| modules.contains_key(m));
    let mut edges = BTreeMap::new();
    for (module, file) in &modules {
        let mut to = BTreeSet::new();
        for (base, mut segs) in named_paths(&std::fs::read_to_string(file).unwrap()) {
            let mut at = module.clone();
            if base == "crate" {
                at.clear();
            } else if base == "super" {
                at.pop();
                while segs.first().is_some_and(|s| s == "super") {
                    segs.remove(0);
                    at.pop();
                }
            }
            at.extend(segs);
            if let Some(target) = resolve(&at)
                && !target.is_empty()
                && &target != module
                && !target.starts_with(module)
            {
                to.insert(target);
            }
        }
        edges.insert(module.clone(), to);
    }
    edges
}

/// The strongly connected components of more than one module (Tarjan).
fn cycles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, (usize, usize)>,
        stack: Vec<&'a Vec<String>>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a Vec<String>) {
            self.index.insert(v, (self.next, self.next));
            self.next += 1;
            self.stack.push(v);
            for w in &self.edges[v] {
                match self.index.get(w).copied() {
                    None => {
                        self.visit(w);
                        let low = self.index[w].1.min(self.index[v].1);
                        self.index.get_mut(v).unwrap().1 = low;
                    }
                    Some((w_index, _)) if self.stack.contains(&w) => {
                        let low = w_index.min(self.index[v].1);
                        self.index.get_mut(v).unwrap().1 = low;
                    }
                    Some(_) => {}
                }
            }
            let (index, low) = self.index[v];
            if index == low {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    component.push(w.join("::"));
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk { edges, index: BTreeMap::new(), stack: Vec::new(), next: 0, found: Vec::new() };
    for v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let found = cycles(&graph(&src()));
    assert!(found.is_empty(), "import cycles between modules of host/src: {found:?}");
}

#[test]
fn the_cycle_check_finds_a_cycle_between_two_files_of_one_folder() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("a")).unwrap();
    std::fs::write(dir.path().join("lib.rs"), "mod a;\n").unwrap();
    std::fs::write(dir.path().join("a/mod.rs"), "mod x;\nmod y;\npub use x::X;\n").unwrap();
    std::fs::write(dir.path().join("a/x.rs"), "use super::y::Y;\n// super::z is a comment\n").unwrap();
    std::fs::write(dir.path().join("a/y.rs"), "pub fn f() { crate::a::x::g() }\n").unwrap();
    assert_eq!(cycles(&graph(dir.path())), vec![vec!["a::x".to_owned(), "a::y".to_owned()]]);
    // The parent declaring its children, and children naming their parent, are no cycle.
    std::fs::write(dir.path().join("a/y.rs"), "use super::X;\n").unwrap();
    assert!(cycles(&graph(dir.path())).is_empty());
}

#[test]
fn no_file_is_longer_than_a_sitting() {
    let mut files = Vec::new();
    sources(&src(), &mut files);
    let mut long: Vec<(usize, String)> = files
        .iter()
        .map(|f| (std::fs::read_to_string(f).unwrap().lines().count(), f.strip_prefix(src()).unwrap().display().to_string()))
        .filter(|(n, _)| *n > MAX_LINES)
        .collect();
    long.sort();
    assert!(long.is_empty(), "files of host/src over {MAX_LINES} lines: {long:?}");
}
