//! Run a [`Reconciler`] natively inside a host (feature `embed`, native targets only).
//!
//! A plugin crate built as an `rlib` can be linked into a native program and run without a
//! Wasm runtime: the program implements [`Backend`] over its own cache and calls
//! [`reconcile_with`]. The reconciler's [`cache`](crate::cache), [`meta`](crate::meta) and
//! [`log`](crate::log) calls then go to that backend, on the calling thread, for the duration
//! of the call. The wasmloop host does this to run a plugin's own source natively
//! (`wasmloop::native::SdkReconciler`), so "Wasm vs native" compares the same code.
//!
//! The backend is shared for the call (`Rc`): it holds its own handle on the caller's cache.
//!
//! ```
//! use std::collections::BTreeMap;
//! use std::rc::Rc;
//! use wasmloop_sdk::embed::{Backend, reconcile_with};
//! use wasmloop_sdk::{cache, kinds, log::Level, meta::Meta, KindRef, Metadata, Outcome, Reconciler, Request, Error};
//!
//! /// The host's cache: JSON by (namespace, name), Pods only.
//! struct Pods(BTreeMap<(String, String), String>);
//!
//! impl Backend for Pods {
//!     fn get(&self, kind: &KindRef, ns: Option<&str>, name: &str) -> Result<Option<String>, cache::Error> {
//!         if kind != &kinds::POD {
//!             return Err(cache::Error::NotGranted(kind.to_string()));
//!         }
//!         Ok(self.0.get(&(ns.unwrap_or_default().to_owned(), name.to_owned())).cloned())
//!     }
//!     fn list(&self, _: &KindRef, _: Option<&str>, _: Option<&str>) -> Result<Vec<String>, cache::Error> {
//!         Ok(self.0.values().cloned().collect())
//!     }
//!     fn by_index(&self, kind: &KindRef, index: &str, _: &str) -> Result<Vec<String>, cache::Error> {
//!         Err(cache::Error::UnknownIndex(format!("{index} on {kind}")))
//!     }
//!     fn metas(&self, _: &KindRef, _: Vec<String>) -> Vec<Meta> {
//!         Vec::new() // this reconciler makes no metadata reads
//!     }
//!     fn log(&self, level: Level, message: &str) {
//!         println!("{level:?}: {message}");
//!     }
//! }
//!
//! struct Exists;
//! impl Reconciler for Exists {
//!     fn metadata() -> Metadata {
//!         Metadata::new("exists", "0.1.0").reconciles(kinds::POD)
//!     }
//!     fn reconcile(req: Request) -> Result<Outcome, Error> {
//!         let found = cache::get_raw(&req.key.kind, req.key.ns(), &req.key.name)?;
//!         wasmloop_sdk::info!("{} is cached: {}", req.key, found.is_some());
//!         Ok(Outcome::new())
//!     }
//! }
//!
//! let objects = BTreeMap::from([(("shop".to_owned(), "web".to_owned()), r#"{"metadata":{}}"#.to_owned())]);
//! let out = reconcile_with::<Exists>(Rc::new(Pods(objects)), Request::new(kinds::POD.key(Some("shop"), "web")));
//! assert_eq!(out, Ok(Outcome::new()));
//! // Outside the call there is no cache again.
//! assert_eq!(cache::get_raw(&kinds::POD, Some("shop"), "web"), Err(cache::Error::NoHost));
//! ```

use std::rc::Rc;

use crate::{Error, Outcome, Reconciler, Request};

pub use crate::native::Backend;

/// Reconcile `request` with `R`, its cache reads and logs answered by `backend`.
///
/// `backend` answers this thread's reads only while the call runs; whatever was installed
/// before (another `reconcile_with` further up the stack, a `testing` fake) is restored when
/// it returns or unwinds from a panic of the reconciler (the panic itself propagates: catch it
/// with [`std::panic::catch_unwind`] if the host must survive it).
///
/// Returns what the Wasm export returns to the host: the reconciler's outcome, or its error,
/// including the permanent error of an action builder given an unusable object
/// ([`Outcome::into_result`]).
pub fn reconcile_with<R: Reconciler>(backend: Rc<dyn Backend>, request: Request) -> Result<Outcome, Error> {
    crate::native::with_backend(backend, || R::reconcile(request)).and_then(Outcome::into_result)
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::panic::{AssertUnwindSafe, catch_unwind};

    use serde_json::{Value, json};

    use super::*;
    use crate::cache::{self, Error as CacheError};
    use crate::log::Level;
    use crate::meta::{self, Meta};
    use crate::object::ObjectMeta;
    use crate::testing::FakeCache;
    use crate::{KindRef, Metadata, kinds};

    /// A backend over a list of Pods that keeps its logs.
    struct Pods {
        pods: Vec<Value>,
        logs: RefCell<Vec<String>>,
    }

    impl Pods {
        fn new(pods: Vec<Value>) -> Rc<Self> {
            Rc::new(Self { pods, logs: RefCell::default() })
        }
    }

    impl Backend for Pods {
        fn get(&self, kind: &KindRef, _: Option<&str>, name: &str) -> Result<Option<String>, CacheError> {
            if kind != &kinds::POD {
                return Err(CacheError::NotGranted(kind.to_string()));
            }
            Ok(self.pods.iter().find(|p| p["metadata"]["name"] == name).map(Value::to_string))
        }
        fn list(&self, _: &KindRef, _: Option<&str>, _: Option<&str>) -> Result<Vec<String>, CacheError> {
            Ok(self.pods.iter().map(Value::to_string).collect())
        }
        fn by_index(&self, _: &KindRef, index: &str, _: &str) -> Result<Vec<String>, CacheError> {
            Err(CacheError::UnknownIndex(index.to_owned()))
        }
        fn metas(&self, kind: &KindRef, objects: Vec<String>) -> Vec<Meta> {
            objects
                .iter()
                .map(|json| {
                    let v: Value = serde_json::from_str(json).unwrap();
                    let metadata: ObjectMeta = serde_json::from_value(v["metadata"].clone()).unwrap();
                    Meta { kind: kind.clone(), metadata, fields: vec![v.pointer("/status/phase").map(Value::to_string)] }
                })
                .collect()
        }
        fn log(&self, _: Level, message: &str) {
            self.logs.borrow_mut().push(message.to_owned());
        }
    }

    fn pod(name: &str, phase: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "uid": name},
               "status": {"phase": phase}})
    }

    /// Deletes the Pod it is asked about if it failed, reading it both ways.
    struct Reaper;

    impl Reconciler for Reaper {
        fn metadata() -> Metadata {
            Metadata::new("reaper", "0.1.0").reconciles(kinds::POD).field(kinds::POD, "status.phase")
        }
        fn reconcile(req: Request) -> Result<Outcome, Error> {
            let Some(pod) = cache::get_key::<Value>(&req.key)? else { return Ok(Outcome::new()) };
            let listed = meta::list(&kinds::POD, Some("ns"), None)?;
            crate::info!("{} pods", listed.len());
            let me = meta::get(&kinds::POD, Some("ns"), &req.key.name)?.expect("get_meta finds it");
            match me.field::<String>(0).as_deref() {
                Some("Failed") => Ok(Outcome::new().delete(&pod)),
                Some(_) => Ok(Outcome::new()),
                None => Ok(Outcome::new().status(&json!({"no": "key"}), json!({}))), // invalid: no kind
            }
        }
    }

    struct Panics;

    impl Reconciler for Panics {
        fn metadata() -> Metadata {
            Metadata::new("panics", "0.1.0").reconciles(kinds::POD)
        }
        fn reconcile(_: Request) -> Result<Outcome, Error> {
            let _ = cache::get_raw(&kinds::POD, None, "x");
            panic!("boom");
        }
    }

    fn req(name: &str) -> Request {
        Request::new(kinds::POD.key(Some("ns"), name))
    }

    #[test]
    fn reads_and_logs_go_to_the_backend_for_the_call_only() {
        let backend = Pods::new(vec![pod("a", "Running"), pod("b", "Failed")]);
        assert_eq!(reconcile_with::<Reaper>(backend.clone(), req("a")), Ok(Outcome::new()));
        let out = reconcile_with::<Reaper>(backend.clone(), req("b")).unwrap();
        assert_eq!(out.deleted().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["b"]);
        assert_eq!(reconcile_with::<Reaper>(backend.clone(), req("gone")), Ok(Outcome::new()));
        assert_eq!(*backend.logs.borrow(), ["2 pods", "2 pods"]);
        assert_eq!(cache::get_raw(&kinds::POD, None, "a"), Err(CacheError::NoHost));
    }

    #[test]
    fn an_invalid_outcome_is_a_permanent_error() {
        let pods = vec![json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "c", "namespace": "ns"}})];
        let err = reconcile_with::<Reaper>(Pods::new(pods), req("c")).unwrap_err();
        assert!(!err.is_transient(), "{err}");
        assert!(err.message().contains("status"), "{err}");
    }

    #[test]
    fn the_previous_backend_is_restored_after_a_nested_call_and_after_a_panic() {
        let fake = FakeCache::for_reconciler::<Reaper>().with(pod("outer", "Running"));
        let backend = Pods::new(vec![pod("inner", "Running")]);
        fake.enter(|| {
            let names =
                || cache::list::<Value>(&kinds::POD, None, None).unwrap().iter().map(|p| p["metadata"]["name"].clone()).collect::<Vec<_>>();
            assert_eq!(names(), ["outer"]);
            crate::native::with_backend(backend.clone(), || assert_eq!(names(), ["inner"]));
            assert_eq!(names(), ["outer"]);
            let panicked = catch_unwind(AssertUnwindSafe(|| reconcile_with::<Panics>(backend.clone(), req("x"))));
            assert!(panicked.is_err());
            assert_eq!(names(), ["outer"]);
        });
        let panicked = catch_unwind(|| reconcile_with::<Panics>(Pods::new(Vec::new()), req("x")));
        assert!(panicked.is_err());
        assert_eq!(cache::get_raw(&kinds::POD, None, "x"), Err(CacheError::NoHost));
    }
}
