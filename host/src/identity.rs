//! Whose authority a plugin's writes carry: its own ServiceAccount, through impersonation.
//!
//! The host sends every write a plugin returns *as the plugin* (`Impersonate-User:
//! system:serviceaccount:<namespace>:<name>`, as Flux's kustomize-controller does with
//! `serviceAccountName`), so the API server authorizes it against that identity's RBAC: a bug in
//! the host's own checks cannot give a plugin more than the admin bound to it. The host's own
//! account keeps its informer reads, its own writes (status annotations, Events, Leases) and
//! `impersonate` on exactly the plugins' accounts.
//!
//! Reads go through the host's informers, with the host's rights; at load the host asks the API
//! server ([`check_reads`], SubjectAccessReviews) whether the plugin's identity may list and
//! watch what it will read, and refuses it otherwise, so the cache never shows a plugin more
//! than its RBAC would.

use std::fmt;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::{Api, PostParams};

use crate::kinds::ResolvedKind;

/// The prefix of a plugin's default ServiceAccount: `wasmloop-plugin-<name>`.
pub const DEFAULT_PREFIX: &str = "wasmloop-plugin-";

/// Errors checking what an identity may do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The identity lacks a rule its reads need.
    #[error(
        "{identity} may not {verbs} {resource} {scope}: add a rule {{apiGroups: [\"{group}\"], resources: [\"{plural}\"], \
         verbs: [list, watch]}} to its RBAC (`wasmloop pack --rbac` prints what the manifest needs)"
    )]
    MissingRead {
        /// Who lacks the rule.
        identity: Identity,
        /// The verbs it may not use, e.g. `list and watch`.
        verbs: String,
        /// The kind read.
        resource: String,
        /// Where: `in namespace <ns>`, `in all namespaces` or `(cluster-scoped)`.
        scope: String,
        /// The resource's API group (empty for the core group).
        group: String,
        /// The resource's plural name.
        plural: String,
    },
    /// The API server did not answer the review (or the host may not ask it).
    #[error("cannot check the RBAC of {identity} (SubjectAccessReview): {source}")]
    Review {
        /// Whose rights were asked about.
        identity: Identity,
        /// The API server's error.
        source: kube::Error,
    },
}

/// A result whose error is an identity check's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A ServiceAccount a plugin acts as.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    /// The ServiceAccount's namespace (the plugin ConfigMap's).
    pub namespace: String,
    /// The ServiceAccount's name.
    pub name: String,
}

impl Identity {
    /// The identity of plugin `plugin` loaded from `namespace`: `service_account` if the manifest
    /// names one, else `wasmloop-plugin-<plugin>`.
    pub fn of_plugin(namespace: &str, plugin: &str, service_account: Option<&str>) -> Self {
        let name = service_account.map_or_else(|| format!("{DEFAULT_PREFIX}{plugin}"), str::to_owned);
        Self { namespace: namespace.to_owned(), name }
    }

    /// `system:serviceaccount:<namespace>:<name>`, the user the API server sees.
    pub fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }

    /// The groups the API server gives a ServiceAccount (impersonating one without groups gets
    /// the same), used in reviews.
    pub fn groups(&self) -> Vec<String> {
        vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{}", self.namespace), "system:authenticated".into()]
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.username())
    }
}

/// How the host authorizes plugin writes (`wasmloop run --plugin-identity`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PluginIdentity {
    /// Each plugin writes as its own ServiceAccount (impersonation), checked by the API server.
    #[default]
    Own,
    /// Plugins write with the host's own credentials: only the host's grants and protected
    /// objects stand between a plugin and the cluster (single-tenant clusters, development).
    Host,
}

/// One read the plugin will make: a kind, everywhere (`None`) or in one namespace.
#[derive(Clone, Debug)]
pub struct Read {
    /// The kind read, as discovery resolved it.
    pub kind: ResolvedKind,
    /// The namespace read, or `None` for all of them.
    pub namespace: Option<String>,
}

/// Ask the API server whether `identity` may list and watch every read in `reads`; the first
/// missing rule is the error. Two SubjectAccessReviews per read, sent by the host.
pub async fn check_reads(client: &kube::Client, identity: &Identity, reads: &[Read]) -> Result<()> {
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    for read in reads {
        let mut missing = Vec::new();
        for verb in ["list", "watch"] {
            if !review(&api, identity, read, verb).await? {
                missing.push(verb);
            }
        }
        if !missing.is_empty() {
            let resource = &read.kind.resource;
            let scope = match &read.namespace {
                Some(ns) => format!("in namespace {ns}"),
                None if read.kind.namespaced => "in all namespaces".to_owned(),
                None => "(cluster-scoped)".to_owned(),
            };
            return Err(Error::MissingRead {
                identity: identity.clone(),
                verbs: missing.join(" and "),
                resource: read.kind.kind.to_string(),
                scope,
                group: resource.group.clone(),
                plural: resource.plural.clone(),
            });
        }
    }
    Ok(())
}

async fn review(api: &Api<SubjectAccessReview>, identity: &Identity, read: &Read, verb: &str) -> Result<bool> {
    let resource = &read.kind.resource;
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(identity.username()),
            groups: Some(identity.groups()),
            resource_attributes: Some(ResourceAttributes {
                group: Some(resource.group.clone()),
                version: Some(resource.version.clone()),
                resource: Some(resource.plural.clone()),
                namespace: read.namespace.clone(),
                verb: Some(verb.to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer =
        api.create(&PostParams::default(), &review).await.map_err(|source| Error::Review { identity: identity.clone(), source })?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_acts_as_its_own_service_account() {
        let id = Identity::of_plugin("wasmloop", "podset", None);
        assert_eq!(id.username(), "system:serviceaccount:wasmloop:wasmloop-plugin-podset");
        assert_eq!(id.groups(), ["system:serviceaccounts", "system:serviceaccounts:wasmloop", "system:authenticated"]);
        assert_eq!(Identity::of_plugin("ops", "podset", Some("podsets")).to_string(), "system:serviceaccount:ops:podsets");
    }
}
