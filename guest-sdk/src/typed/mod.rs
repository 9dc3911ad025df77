//! Typed built-in objects without `k8s-openapi`'s weight: Pod, Deployment, ReplicaSet,
//! StatefulSet, Service, ConfigMap, Secret, Namespace and Job, trimmed to the fields operators
//! use.
//!
//! Every struct keeps the fields it does not name in `extra` (`#[serde(flatten)]`), at every
//! level, so a read-modify-write never drops data: what is read from the cache serializes back
//! to the same JSON (empty lists and maps aside). Use them with [`cache`](crate::cache) reads
//! (which deserialize) and the [`Outcome`](crate::Outcome) builders (which serialize); each type
//! names its kind ([`Resource::KIND_REF`]) and starts from [`Resource`]-filled `apiVersion` and
//! `kind` (`new` and `Default`).
//!
//! ```
//! use wasmloop_sdk::typed::{Container, Deployment, LabelSelector, PodSpec, PodTemplateSpec, Resource};
//! use wasmloop_sdk::Outcome;
//!
//! let mut d = Deployment::new("web");
//! d.metadata.namespace = Some("shop".into());
//! let labels = [("app".to_owned(), "web".to_owned())];
//! let mut template = PodTemplateSpec::default();
//! template.metadata.labels.extend(labels.clone());
//! template.spec = Some(PodSpec { containers: vec![Container::new("web", "nginx:1.27")], ..Default::default() });
//! d.spec = Some(wasmloop_sdk::typed::DeploymentSpec {
//!     replicas: Some(3),
//!     selector: Some(LabelSelector::from_labels(labels)),
//!     template,
//!     ..Default::default()
//! });
//! let out = Outcome::new().apply(&d);
//! let applied = out.applied().next().unwrap();
//! assert_eq!(applied["apiVersion"], "apps/v1");
//! assert_eq!(applied["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.27");
//! assert_eq!(d.key(), Deployment::KIND_REF.key(Some("shop"), "web"));
//! ```
//!
//! A note on writing: the host's apply is a forced server-side apply, which makes the plugin the
//! owner of every field the object carries. Apply objects built with the fields you manage
//! (`new` and the fields you set, as above), not whole objects read from the cache: those carry
//! other managers' fields (an autoscaler's `replicas`) and their `resourceVersion`. To change a
//! field of an object you read, patch it ([`Outcome::merge_patch`](crate::Outcome::merge_patch)).
//!
//! The `CustomResource` derive (`wasmloop_sdk::CustomResource`, feature `derive`) builds the same
//! kind of type for a custom resource.

mod apps;
mod batch;
mod core;
mod meta;
mod pod;
mod selector;

pub use apps::{
    Deployment, DeploymentSpec, DeploymentStatus, ReplicaSet, ReplicaSetSpec, ReplicaSetStatus, StatefulSet, StatefulSetSpec,
    StatefulSetStatus,
};
pub use batch::{Job, JobSpec, JobStatus};
pub use core::{ConfigMap, IntOrString, Namespace, NamespaceStatus, Secret, Service, ServicePort, ServiceSpec};
pub use meta::{ObjectMeta, Resource};
pub use pod::{Container, ContainerPort, EnvVar, Pod, PodSpec, PodStatus, PodTemplateSpec, ResourceRequirements};
pub use selector::{LabelSelector, LabelSelectorRequirement};

/// Defines a top-level object type: `apiVersion`, `kind`, `metadata`, the given fields and
/// `extra`, with `Default` (apiVersion and kind filled in), `new(name)` and [`Resource`].
macro_rules! resource {
    (
        $(#[$attr:meta])*
        pub struct $name:ident($api_version:literal, $kind:literal, namespaced = $namespaced:literal) {
            $( $(#[$fattr:meta])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$attr])*
        #[derive(Clone, Debug, PartialEq, ::serde::Serialize, ::serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            #[doc = concat!("`apiVersion`: `", $api_version, "`.")]
            #[serde(default)]
            pub api_version: String,
            #[doc = concat!("`kind`: `", $kind, "`.")]
            #[serde(default)]
            pub kind: String,
            /// Standard object metadata.
            #[serde(default)]
            pub metadata: $crate::typed::ObjectMeta,
            $( $(#[$fattr])* pub $field: $ty, )*
            /// Top-level fields not named above, kept as read.
            #[serde(flatten)]
            pub extra: ::serde_json::Map<String, ::serde_json::Value>,
        }

        impl Default for $name {
            fn default() -> Self {
                Self {
                    api_version: $api_version.into(),
                    kind: $kind.into(),
                    metadata: Default::default(),
                    $( $field: Default::default(), )*
                    extra: Default::default(),
                }
            }
        }

        impl $name {
            #[doc = concat!("A `", $kind, "` named `name` (set `metadata.namespace` too, or let the host's rules for the kind apply).")]
            pub fn new(name: impl Into<String>) -> Self {
                let mut o = Self::default();
                o.metadata.name = name.into();
                o
            }
        }

        impl $crate::typed::Resource for $name {
            const API_VERSION: &'static str = $api_version;
            const KIND: &'static str = $kind;
            const NAMESPACED: bool = $namespaced;
            fn metadata(&self) -> &$crate::typed::ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut $crate::typed::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
use resource;

#[cfg(test)]
mod tests;
