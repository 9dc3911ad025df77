//! Write wasmloop reconcile plugins in Rust.
//!
//! A plugin is a `cdylib` built for `wasm32-wasip2`: a type implementing [`Reconciler`],
//! exported with [`export_reconciler!`]. It reads the host's informer cache through [`cache`]
//! and returns an [`Outcome`]: actions (create, apply, delete, status, event) for the host to
//! execute, and an optional requeue.
//!
//! ```
//! use std::time::Duration;
//! use wasmloop_sdk::{cache, kinds, object, Metadata, Outcome, Reconciler, Request, Error};
//! use serde_json::{json, Value};
//!
//! pub struct Hello;
//!
//! impl Reconciler for Hello {
//!     fn metadata() -> Metadata {
//!         Metadata::new("hello", "0.1.0").reconciles(kinds::NAMESPACE).owns(kinds::CONFIG_MAP)
//!     }
//!
//!     fn reconcile(req: Request) -> Result<Outcome, Error> {
//!         let Some(ns) = cache::get_key::<Value>(&req.key)? else { return Ok(Outcome::new()) };
//!         if object::is_deleting(&ns) {
//!             return Ok(Outcome::new());
//!         }
//!         let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
//!                         "metadata": {"name": "hello", "namespace": req.key.name},
//!                         "data": {"greeting": "hi"}});
//!         Ok(Outcome::new().apply(&cm).requeue_after(Duration::from_secs(600)))
//!     }
//! }
//!
//! wasmloop_sdk::export_reconciler!(Hello);
//! ```
//!
//! On native builds the cache is whatever backend the caller installs on the thread: unit-test
//! reconcilers with `testing::FakeCache` (feature `testing`), no wasm and no cluster needed, or
//! run them inside a native host with `embed::reconcile_with` (feature `embed`).
//!
//! # What is where
//!
//! - Reading: [`cache`] (whole objects, parsed into any `Deserialize` type), [`meta`] (metadata
//!   and declared fields only: less to parse for large objects; see its docs for the cost).
//! - Objects: JSON with the [`object`] helpers; [`typed`] structs for the common built-in kinds
//!   (Pod, Deployment, Service, ConfigMap, ...), light and lossless; `CustomResource` (feature
//!   `derive`) for your own kinds; the full `k8s-openapi` types as `k8s` (feature `k8s`, which
//!   makes a plugin several times larger).
//! - Writing: [`Outcome`]'s builders (create, apply, delete, status, events) and [`patch`]
//!   (adopt, release, finalizers, guarded patches); [`Deletion`] for deletes with preconditions.
//! - Controller patterns: [`children`] (declare a parent's children, get the applies and deletes,
//!   Metacontroller style), [`conditions`] (status conditions with Go's `meta` semantics),
//!   [`time`] (Kubernetes timestamps, the wall clock).

#![warn(missing_docs)]
#![forbid(unsafe_code)]

extern crate self as wasmloop_sdk;

mod action;
pub mod cache;
pub mod children;
pub mod conditions;
mod error;
mod invalid;
pub mod log;
pub mod meta;
pub mod object;
mod outcome;
pub mod patch;
pub mod time;
pub mod typed;
mod types;

#[cfg(target_arch = "wasm32")]
mod guest;
#[cfg(target_arch = "wasm32")]
use guest as sys;

#[cfg(not(target_arch = "wasm32"))]
mod native;
#[cfg(not(target_arch = "wasm32"))]
use native as sys;

#[cfg(all(feature = "testing", not(target_arch = "wasm32")))]
pub mod testing;

#[cfg(all(feature = "embed", not(target_arch = "wasm32")))]
pub mod embed;

/// `#[derive(CustomResource)]` (feature `derive`): a custom resource's object type from its
/// spec struct, with [`typed::ObjectMeta`] metadata and [`typed::Resource`].
///
/// `#[resource(group = "...", version = "...", kind = "...")]` names the kind; add `namespaced`
/// for a namespaced one and `status = "Type"` for a status. The generated type keeps unknown
/// top-level and metadata fields; the spec and status keep theirs only if they say so
/// (`#[serde(flatten)] extra: serde_json::Map<String, serde_json::Value>`).
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use wasmloop_sdk::typed::Resource;
/// use wasmloop_sdk::{CustomResource, KindRef, Outcome};
///
/// #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default)]
/// #[resource(group = "example.com", version = "v1", kind = "Foo", namespaced, status = "FooStatus")]
/// pub struct FooSpec {
///     pub replicas: i32,
/// }
///
/// #[derive(Serialize, Deserialize, Clone, Debug, Default)]
/// #[serde(rename_all = "camelCase")]
/// pub struct FooStatus {
///     pub ready_replicas: i32,
/// }
///
/// assert_eq!(Foo::KIND_REF, KindRef::from_static("example.com/v1", "Foo"));
/// let mut foo = Foo::new("web", FooSpec { replicas: 3 });
/// foo.metadata.namespace = Some("shop".into());
/// assert_eq!(foo.key().to_string(), "example.com/v1/Foo/shop/web");
/// let applied = Outcome::new().apply(&foo);
/// assert_eq!(applied.applied().next().unwrap()["spec"]["replicas"], 3);
/// let read: Foo = serde_json::from_value(serde_json::json!({"apiVersion": "example.com/v1", "kind": "Foo",
///     "metadata": {"name": "web"}, "spec": {"replicas": 1}, "status": {"readyReplicas": 1}})).unwrap();
/// assert_eq!(read.status.unwrap().ready_replicas, 1);
/// ```
#[cfg(feature = "derive")]
pub use wasmloop_sdk_derive::CustomResource;

/// Typed Kubernetes structs: the `k8s-openapi` crate (0.29, API v1.33), feature `k8s`.
#[cfg(feature = "k8s")]
pub use k8s_openapi as k8s;

pub use action::{Action, Deletion, Event, EventType, Patch, PatchType, Preconditions};
pub use error::{Error, ErrorKind, ResultExt};
pub use invalid::InvalidObject;
pub use outcome::Outcome;
pub use serde_json;
pub use types::{Field, Index, IndexValue, KindRef, Mapping, Metadata, ObjectKey, Reason, Request, Watch, kinds};

/// Reconcile logic, exported to the host with [`export_reconciler!`].
///
/// Both functions are called without state: everything a reconcile needs comes from the
/// request and the cache. A panic traps the plugin instance (the host logs it and retries with
/// backoff); return an [`Error`] instead for expected failures.
pub trait Reconciler {
    /// What the plugin reconciles, watches and indexes; called once when the host loads it.
    fn metadata() -> Metadata;
    /// Move the object named by `req.key` towards its desired state: read the cache, return
    /// the actions. Called for every event, resync and requeue of the key; must be idempotent.
    fn reconcile(req: Request) -> Result<Outcome, Error>;
}

/// Export a [`Reconciler`] as the plugin's `wasmloop:controller/plugin` implementation.
///
/// Use it once, at the top level of the plugin crate: `wasmloop_sdk::export_reconciler!(MyType);`.
/// On native builds it only checks that the type is a `Reconciler`, so the same crate can be
/// unit-tested with `cargo test`.
#[macro_export]
macro_rules! export_reconciler {
    ($ty:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __WasmloopReconciler;
            impl $crate::__private::Guest for __WasmloopReconciler {
                fn metadata() -> $crate::__private::bindings::wasmloop::controller::types::PluginMetadata {
                    $crate::__private::metadata::<$ty>()
                }
                fn reconcile(
                    request: $crate::__private::bindings::wasmloop::controller::types::Request,
                ) -> ::core::result::Result<
                    $crate::__private::bindings::wasmloop::controller::types::Outcome,
                    $crate::__private::bindings::wasmloop::controller::types::Failure,
                > {
                    $crate::__private::reconcile::<$ty>(request)
                }
            }
            $crate::__private::bindings::export_controller!(
                __WasmloopReconciler with_types_in $crate::__private::bindings
            );
        };
        #[cfg(not(target_arch = "wasm32"))]
        const _: fn() = || {
            fn is_reconciler<T: $crate::Reconciler>() {}
            is_reconciler::<$ty>();
        };
    };
}

#[doc(hidden)]
pub mod __private {
    // For code generated by `#[derive(CustomResource)]` in crates that name serde otherwise.
    #[cfg(target_arch = "wasm32")]
    pub use crate::guest::{Guest, bindings, metadata, reconcile};
    pub use serde;
    #[cfg(target_arch = "wasm32")]
    pub use wit_bindgen;
}
