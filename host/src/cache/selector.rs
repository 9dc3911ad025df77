//! Label selectors. The grammar and matching rules live in [`wasmloop_model::selector`], shared
//! with the SDK's test fake so both accept and match exactly the same selectors; here, how the
//! cache's objects are matched and how a bad selector is reported.

pub use wasmloop_model::selector::{Labels, Selector, label_pair};

use super::{CachedObject, Error};

impl Labels for CachedObject {
    fn label(&self, key: &str) -> Option<&str> {
        CachedObject::label(self, key)
    }
}

impl From<wasmloop_model::selector::Error> for Error {
    fn from(e: wasmloop_model::selector::Error) -> Self {
        Error::InvalidSelector { selector: e.selector, reason: e.reason.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_cached_objects_and_reports_bad_selectors_as_cache_errors() {
        let obj = CachedObject::from_value(serde_json::json!({"metadata": {"name": "p", "labels": {"app": "web"}}})).unwrap();
        assert!(Selector::parse("app in (web)").unwrap().matches(&obj));
        assert!(!Selector::parse("app,tier").unwrap().matches(&obj));
        let err: Error = Selector::parse("app in ()").unwrap_err().into();
        assert!(
            matches!(err, Error::InvalidSelector { ref selector, ref reason } if selector == "app in ()" && reason.contains("at least one value")),
            "{err:?}"
        );
    }

    /// The cache's selectors against the conformance corpus (`model/conformance/selectors.json`):
    /// each case's selector matched against cached objects carrying its label sets.
    #[test]
    fn conformance_selectors() {
        wasmloop_model::conformance::check("selectors", |case| {
            match Selector::parse(case.input["selector"].as_str().unwrap_or_default()) {
                Ok(sel) => {
                    let objects = case.input["labels"].as_array().into_iter().flatten().map(|labels| {
                        CachedObject::from_value(serde_json::json!({"metadata": {"name": "o", "labels": labels}})).expect("cacheable")
                    });
                    serde_json::json!({"matches": objects.map(|o| sel.matches(&o)).collect::<Vec<_>>()})
                }
                Err(e) => serde_json::json!({"error": {"kind": e.reason.kind(), "at": e.reason.at()}}),
            }
        });
    }
}
