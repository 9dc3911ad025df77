//! What a plugin imports that the host does not provide, named by interface and function.
//!
//! wasmtime's linker stops at the first import it cannot satisfy and says so in a chain of
//! contexts ("component imports instance `wasi:http/types@0.2.3`, but a matching implementation
//! was not found in the linker" → "instance export `fields` has the wrong type" → "resource
//! implementation is missing"). A plugin author needs the whole list, by name: which interfaces
//! the toolchain pulled in and which of their functions, so the refusal lists every imported
//! interface outside what the host provides ([`PROVIDED`]), with its functions, plus the item
//! the linker itself named (an interface the host knows but a function it lacks, such as an
//! unstable one).

use std::fmt;

use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

/// The interfaces (`package/interface`, without version) the host's linker provides: WASI 0.2
/// as `wasmtime_wasi::p2::add_to_linker_async` adds it (run without capabilities: no files, no
/// network, no environment) and the contract's `cache` and `log` (0.1 and 0.2).
pub const PROVIDED: &[&str] = &[
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:clocks/monotonic-clock",
    "wasi:clocks/wall-clock",
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:sockets/network",
    "wasi:sockets/instance-network",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
    "wasi:sockets/ip-name-lookup",
    "wasmloop:controller/types",
    "wasmloop:controller/cache",
    "wasmloop:controller/log",
];

/// Most function names listed per interface (the rest are counted).
const MAX_LISTED: usize = 12;

/// One imported interface (or top-level item) the host does not provide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unprovided {
    /// The import's name as the component writes it, e.g. `wasi:http/types@0.2.3`.
    pub interface: String,
    /// Its functions (resource methods as `[method]fields.get`), or the one item the linker
    /// named when the host provides the interface but not that item.
    pub functions: Vec<String>,
    /// The linker's reason, when it named this import (e.g. "function implementation is missing").
    pub reason: Option<String>,
}

impl fmt::Display for Unprovided {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.interface)?;
        if !self.functions.is_empty() {
            let listed: Vec<&str> = self.functions.iter().take(MAX_LISTED).map(String::as_str).collect();
            let more = self.functions.len().saturating_sub(MAX_LISTED);
            let more = if more > 0 { format!(" and {more} more") } else { String::new() };
            write!(f, " (function{} {}{more})", if self.functions.len() == 1 { "" } else { "s" }, listed.join(", "))?;
        }
        if let Some(reason) = &self.reason {
            write!(f, ": {reason}")?;
        }
        Ok(())
    }
}

/// `wasi:http/types@0.2.3` → `wasi:http/types`.
fn unversioned(name: &str) -> &str {
    name.split_once('@').map_or(name, |(n, _)| n)
}

/// Whether the host provides the interface `name` (any version: the linker matches compatible ones).
pub fn is_provided(name: &str) -> bool {
    PROVIDED.contains(&unversioned(name))
}

/// The functions of an imported item: an instance's functions, or the item itself.
fn functions(engine: &Engine, name: &str, item: &ComponentItem) -> Vec<String> {
    match item {
        ComponentItem::ComponentInstance(i) => {
            i.exports(engine).filter(|(_, e)| matches!(e.ty, ComponentItem::ComponentFunc(_))).map(|(n, _)| n.to_owned()).collect()
        }
        ComponentItem::ComponentFunc(_) => vec![name.to_owned()],
        _ => Vec::new(),
    }
}

/// What the linker named in `err`: (import, item within it, reason), from its context chain.
fn named_by_linker(err: &wasmtime::Error) -> Option<(String, Option<String>, String)> {
    let mut chain = err.chain().map(ToString::to_string);
    let first = chain.find(|c| c.starts_with("component imports "))?;
    let import = first.split('`').nth(1)?.to_owned();
    let rest: Vec<String> = chain.collect();
    let item = rest.iter().find_map(|c| c.strip_prefix("instance export `").and_then(|r| r.split('`').next()).map(str::to_owned));
    let reason = rest.last().cloned().unwrap_or_else(|| "no matching implementation".to_owned());
    Some((import, item, reason))
}

/// The imports of `component` the host does not provide, given the linker's error `err`:
/// every imported interface outside [`PROVIDED`] with its functions, and the import the linker
/// named (with the item and its reason) if it is not among them.
pub fn unprovided(engine: &Engine, component: &Component, err: &wasmtime::Error) -> Vec<Unprovided> {
    let ty = component.component_type();
    let mut out: Vec<Unprovided> = ty
        .imports(engine)
        .filter(|(name, _)| !is_provided(name))
        .map(|(name, item)| Unprovided { interface: name.to_owned(), functions: functions(engine, name, &item.ty), reason: None })
        .collect();
    if let Some((import, item, reason)) = named_by_linker(err) {
        match out.iter_mut().find(|u| u.interface == import) {
            Some(u) => u.reason = Some(item.map_or(reason.clone(), |i| format!("`{i}`: {reason}"))),
            None => out.insert(0, Unprovided { interface: import, functions: item.into_iter().collect(), reason: Some(reason) }),
        }
    }
    out
}

/// The refusal's text: each unprovided import, then what the host offers and how to get there.
pub fn describe(unprovided: &[Unprovided]) -> String {
    let list: Vec<String> = unprovided.iter().map(ToString::to_string).collect();
    let hint = if unprovided.iter().any(|u| u.interface.starts_with("wasi:http/")) {
        " (a JavaScript plugin built with componentize-js: leave out its HTTP support with `-d http -d fetch-event`, \
         as the wasmloop SDK's build does)"
    } else {
        ""
    };
    format!(
        "{}; this host provides WASI 0.2 without capabilities (cli, clocks, filesystem, io, random, sockets) and \
         wasmloop:controller cache and log, nothing else{hint}",
        list.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provided_interfaces_match_any_version() {
        assert!(is_provided("wasi:io/streams@0.2.6"));
        assert!(is_provided("wasi:io/streams@0.2.0"));
        assert!(is_provided("wasmloop:controller/cache@0.2.0"));
        assert!(!is_provided("wasi:http/types@0.2.3"));
        assert!(!is_provided("wasi:http/outgoing-handler@0.2.0"));
        assert!(!is_provided("wasi:keyvalue/store"));
    }

    #[test]
    fn the_linkers_chain_is_read_for_interface_item_and_reason() {
        let err = wasmtime::Error::msg("function implementation is missing")
            .context("instance export `exit-with-code` has the wrong type")
            .context("component imports instance `wasi:cli/exit@0.2.6`, but a matching implementation was not found in the linker");
        let (import, item, reason) = named_by_linker(&err).unwrap();
        assert_eq!(import, "wasi:cli/exit@0.2.6");
        assert_eq!(item.as_deref(), Some("exit-with-code"));
        assert_eq!(reason, "function implementation is missing");
        assert!(named_by_linker(&wasmtime::Error::msg("something else")).is_none());
    }

    #[test]
    fn refusals_name_interfaces_and_functions() {
        let u = vec![
            Unprovided {
                interface: "wasi:http/outgoing-handler@0.2.3".into(),
                functions: vec!["handle".into()],
                reason: Some("`handle`: function implementation is missing".into()),
            },
            Unprovided {
                interface: "wasi:http/types@0.2.3".into(),
                functions: (0..20).map(|i| format!("[method]fields.f{i}")).collect(),
                reason: None,
            },
        ];
        let text = describe(&u);
        assert!(
            text.starts_with("wasi:http/outgoing-handler@0.2.3 (function handle): `handle`: function implementation is missing"),
            "{text}"
        );
        assert!(text.contains("wasi:http/types@0.2.3 (functions [method]fields.f0, "), "{text}");
        assert!(text.contains("and 8 more)"), "{text}");
        assert!(text.contains("-d http"), "{text}");
    }
}
