//! Which contract versions this host runs: a plugin exports `wasmloop:controller/plugin@X.Y.Z`
//! and runs here when `X.Y.Z` is semver-compatible with a version the host speaks (same major;
//! while 0.x, same minor). Contracts 0.1 and 0.2 are still loaded, through `compat`.

use wasmtime::component::Component;

use super::bindings;
use super::engine::PluginEngine;

/// Why a component's contract is not one this host runs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The component does not export the plugin interface.
    #[error("the component does not export {expected}@{version} (it exports: {exports}); build it with the wasmloop SDK")]
    NoPluginExport {
        /// The interface expected.
        expected: &'static str,
        /// Its version.
        version: &'static str,
        /// What the component exports instead.
        exports: String,
    },
    /// The plugin speaks a contract version this host does not.
    #[error(
        "the plugin targets {package}@{found} but this host speaks {package}@{expected} \
         (compatible: {compatible}); rebuild it against a matching SDK"
    )]
    WrongVersion {
        /// The contract's package.
        package: &'static str,
        /// The version the plugin exports.
        found: String,
        /// The version this host speaks.
        expected: &'static str,
        /// Every version this host runs.
        compatible: String,
    },
}

/// A result whose error is a contract this host does not run.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether a plugin built against `found` runs on a host speaking `host`: both are full semver
/// versions (`0.1` is not), of the same major and, while 0.x, the same minor.
pub fn compatible(found: &str, host: &str) -> bool {
    match (semver::Version::parse(found), semver::Version::parse(host)) {
        (Ok(found), Ok(host)) => found.major == host.major && (host.major != 0 || found.minor == host.minor),
        _ => false,
    }
}

/// The versions compatible with `host`, as people write them (`0.3.x`, `1.x.y`).
fn compatible_range(host: &str) -> String {
    match semver::Version::parse(host) {
        Ok(v) if v.major == 0 => format!("0.{}.x", v.minor),
        Ok(v) => format!("{}.x.y", v.major),
        Err(_) => host.to_owned(),
    }
}

/// Check which `wasmloop:controller/plugin` version `names` (a component's exports) carry;
/// returns the version found.
pub fn check_export_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<String> {
    let names: Vec<&str> = names.into_iter().collect();
    let prefix = bindings::PLUGIN_INTERFACE;
    let found = names.iter().find_map(|n| match n.split_once('@') {
        Some((iface, version)) if iface == prefix => Some(Some(version)),
        None if *n == prefix => Some(None),
        _ => None,
    });
    match found {
        Some(Some(version)) if bindings::SUPPORTED.iter().any(|host| compatible(version, host)) => Ok(version.to_owned()),
        Some(found) => Err(Error::WrongVersion {
            package: bindings::PACKAGE,
            found: found.unwrap_or("(no version)").to_owned(),
            expected: bindings::VERSION,
            compatible: bindings::SUPPORTED.iter().map(|v| compatible_range(v)).collect::<Vec<_>>().join(", "),
        }),
        None => Err(Error::NoPluginExport {
            expected: prefix,
            version: bindings::VERSION,
            exports: if names.is_empty() { "nothing".into() } else { names.join(", ") },
        }),
    }
}

/// The contract version `component` exports, checked against the host's.
pub(super) fn check_contract(engine: &PluginEngine, component: &Component) -> Result<String> {
    let ty = component.component_type();
    let names: Vec<&str> = ty.exports(engine.engine()).map(|(n, _)| n).collect();
    check_export_names(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_compatible_by_semver_rules() {
        assert!(compatible("0.1.0", "0.1.0"));
        assert!(compatible("0.1.7", "0.1.0"));
        assert!(!compatible("0.2.0", "0.1.0"));
        assert!(!compatible("1.0.0", "0.1.0"));
        assert!(compatible("1.4.0", "1.0.0"));
        assert!(!compatible("2.0.0", "1.0.0"));
        assert!(!compatible("0.1", "0.1.0"));
        assert!(compatible("0.1.0-rc.1", "0.1.0"));
        assert!(compatible("0.3.1+build.7", "0.3.1"));
        assert!(!compatible("0.3.x", "0.3.1"));
    }

    #[test]
    fn export_names_are_checked() {
        assert_eq!(check_export_names(["wasmloop:controller/plugin@0.1.2"]).unwrap(), "0.1.2");
        assert_eq!(check_export_names(["wasmloop:controller/plugin@0.2.0"]).unwrap(), "0.2.0");
        assert_eq!(check_export_names(["wasmloop:controller/plugin@0.3.0"]).unwrap(), "0.3.0");
        assert_eq!(check_export_names(["wasmloop:controller/plugin@0.3.1"]).unwrap(), "0.3.1");
        let err = check_export_names(["wasmloop:controller/plugin@0.4.0"]).unwrap_err().to_string();
        assert_eq!(
            err,
            "the plugin targets wasmloop:controller@0.4.0 but this host speaks wasmloop:controller@0.3.1 \
             (compatible: 0.3.x, 0.2.x, 0.1.x); rebuild it against a matching SDK"
        );
        let err = check_export_names(["wasmloop:controller/plugin"]).unwrap_err().to_string();
        assert!(err.contains("targets wasmloop:controller@(no version)"), "{err}");
        let err = check_export_names(["wasi:http/incoming-handler@0.2.0"]).unwrap_err().to_string();
        assert!(err.contains("does not export wasmloop:controller/plugin@0.3.1 (it exports: wasi:http/incoming-handler@0.2.0)"), "{err}");
        let err = check_export_names([]).unwrap_err().to_string();
        assert!(err.contains("it exports: nothing"), "{err}");
    }

    #[test]
    fn the_host_version_matches_the_wit_file() {
        let wit = include_str!("../../../wit/controller.wit");
        let expected = format!("package {}@{};", bindings::PACKAGE, bindings::VERSION);
        assert!(wit.contains(&expected), "bindings::VERSION is out of date with wit/controller.wit ({expected})");
    }
}
