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

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};

use crate::kinds::ResolvedKind;

/// The prefix of a plugin's default ServiceAccount: `wasmloop-plugin-<name>`.
pub const DEFAULT_PREFIX: &str = "wasmloop-plugin-";
/// The prefix of a candidate version's default ServiceAccount: `wasmloop-candidate-<name>`
/// (distinct from [`DEFAULT_PREFIX`], so no plugin name makes one the other's).
pub const CANDIDATE_PREFIX: &str = "wasmloop-candidate-";
/// The label by which a ServiceAccount is claimed for a plugin: the plugin's name. The host
/// impersonates an account only for the plugin it names (`wasmloop pack --rbac` writes it).
pub const CLAIM_LABEL: &str = "wasmloop.dev/plugin-name";
/// The label that makes a claimed ServiceAccount a candidate version's (`candidate`); absent on
/// a serving version's.
pub const ROLE_LABEL: &str = "wasmloop.dev/plugin-role";

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

/// Which version of a plugin an identity is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The serving version (a plugin ConfigMap without `shadowOf:`).
    Serving,
    /// A candidate version (`shadowOf:`): it writes only on its canary shards, as itself.
    Candidate,
}

impl Role {
    /// The value of [`ROLE_LABEL`] (`None`: the label is absent).
    pub fn label(self) -> Option<&'static str> {
        match self {
            Role::Serving => None,
            Role::Candidate => Some("candidate"),
        }
    }

    fn default_prefix(self) -> &'static str {
        match self {
            Role::Serving => DEFAULT_PREFIX,
            Role::Candidate => CANDIDATE_PREFIX,
        }
    }
}

/// Whom a ServiceAccount is claimed for: a plugin's name and the version's role, as the labels
/// [`CLAIM_LABEL`] and [`ROLE_LABEL`] say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The plugin's name (the manifest's `name`).
    pub plugin: String,
    /// Serving or candidate.
    pub role: Role,
}

impl Claim {
    /// The labels that make an account this claim's.
    pub fn labels(&self) -> BTreeMap<&'static str, String> {
        let mut labels = BTreeMap::from([(CLAIM_LABEL, self.plugin.clone())]);
        if let Some(role) = self.role.label() {
            labels.insert(ROLE_LABEL, role.to_owned());
        }
        labels
    }

    /// The labels as `kubectl label` takes them: `k=v k=v`.
    pub fn label_text(&self) -> String {
        self.labels().iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
    }

    /// The claim `labels` make, if they make one.
    pub fn of_labels(labels: &BTreeMap<String, String>) -> Option<Self> {
        let plugin = labels.get(CLAIM_LABEL).filter(|p| !p.is_empty())?.clone();
        let role = match labels.get(ROLE_LABEL).map(String::as_str) {
            None => Role::Serving,
            Some("candidate") => Role::Candidate,
            // An unknown role claims the account for nothing this host acts as.
            Some(_) => return None,
        };
        Some(Self { plugin, role })
    }
}

impl fmt::Display for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.role {
            Role::Serving => write!(f, "plugin {}", self.plugin),
            Role::Candidate => write!(f, "the candidate version of plugin {}", self.plugin),
        }
    }
}

/// Why an account cannot be a plugin's identity.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The account is one the host itself runs as.
    #[error(
        "{identity} is the host's own ServiceAccount: a plugin never writes as the host (name another account in \
         serviceAccountName, or leave it out for {default})"
    )]
    HostAccount {
        /// The account named.
        identity: Identity,
        /// The plugin's default account.
        default: String,
    },
    /// The account is another plugin's by its name (`wasmloop-plugin-<other>`).
    #[error(
        "{identity} is the default account of another plugin ({holder}): a plugin writes only as an account of its own \
         (leave serviceAccountName out for {default})"
    )]
    OthersDefault {
        /// The account named.
        identity: Identity,
        /// Whose default it is.
        holder: String,
        /// The plugin's default account.
        default: String,
    },
    /// The account is claimed for another plugin (or version) by its labels.
    #[error("{identity} is claimed for {holder} (labels {}): a plugin writes only as an account claimed for it", .holder.label_text())]
    ClaimedByOther {
        /// The account named.
        identity: Identity,
        /// Whom it is claimed for.
        holder: Claim,
    },
    /// The account carries no claim (yet).
    #[error(
        "{identity} is not claimed for {wanted}: label it `kubectl -n {} label serviceaccount {} {}` \
         (`wasmloop pack --rbac` prints it labelled); the plugin starts when it is",
        .identity.namespace, .identity.name, .wanted.label_text()
    )]
    Unclaimed {
        /// The account named.
        identity: Identity,
        /// Whom it should be claimed for.
        wanted: Claim,
    },
    /// The account does not exist (yet).
    #[error("ServiceAccount {namespace}/{name} does not exist (`wasmloop pack --rbac` prints it); the plugin starts when it does")]
    Missing {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The host could not read the account.
    #[error("cannot read ServiceAccount {namespace}/{name} to check whom it is claimed for: {source}")]
    Read {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API server's error.
        source: Box<kube::Error>,
    },
}

impl ClaimError {
    /// Whether the claim can come right by itself (the account created or labelled later):
    /// a wait, not a refusal.
    pub fn can_resolve(&self) -> bool {
        matches!(self, ClaimError::Unclaimed { .. } | ClaimError::Missing { .. } | ClaimError::Read { .. })
    }
}

/// A ServiceAccount a plugin acts as.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    /// The ServiceAccount's namespace (the plugin ConfigMap's).
    pub namespace: String,
    /// The ServiceAccount's name.
    pub name: String,
}

impl Identity {
    /// The identity of plugin `plugin` (as `role`) loaded from `namespace`: `service_account`
    /// if the manifest names one, else `wasmloop-plugin-<plugin>` (a candidate's:
    /// `wasmloop-candidate-<plugin>`).
    pub fn of_plugin(namespace: &str, plugin: &str, role: Role, service_account: Option<&str>) -> Self {
        let name = service_account.map_or_else(|| format!("{}{plugin}", role.default_prefix()), str::to_owned);
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

    /// Whether this name can be `claim`'s identity at all, before anything is read: never an
    /// account the host runs as (`hosts`), never another plugin's default account. `wasmloop
    /// pack --rbac` refuses the same manifests.
    pub fn may_be(&self, claim: &Claim, hosts: &[Identity]) -> Result<(), ClaimError> {
        let default = format!("{}{}", claim.role.default_prefix(), claim.plugin);
        if hosts.contains(self) {
            return Err(ClaimError::HostAccount { identity: self.clone(), default });
        }
        if self.name != default {
            for role in [Role::Serving, Role::Candidate] {
                if let Some(other) = self.name.strip_prefix(role.default_prefix()).filter(|o| !o.is_empty()) {
                    let holder = Claim { plugin: other.to_owned(), role }.to_string();
                    return Err(ClaimError::OthersDefault { identity: self.clone(), holder, default });
                }
            }
        }
        Ok(())
    }

    /// Whether an account whose labels are `labels` is claimed for `claim`.
    pub fn claimed_by(&self, labels: &BTreeMap<String, String>, claim: &Claim) -> Result<(), ClaimError> {
        match Claim::of_labels(labels) {
            Some(holder) if holder == *claim => Ok(()),
            Some(holder) => Err(ClaimError::ClaimedByOther { identity: self.clone(), holder }),
            None => Err(ClaimError::Unclaimed { identity: self.clone(), wanted: claim.clone() }),
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.username())
    }
}

/// Check that `identity` may be `claim`'s ([`Identity::may_be`]) and that the ServiceAccount
/// carries the claim ([`Identity::claimed_by`]): one GET of the account, by the host.
pub async fn check_claim(client: &kube::Client, identity: &Identity, claim: &Claim, hosts: &[Identity]) -> Result<(), ClaimError> {
    identity.may_be(claim, hosts)?;
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), &identity.namespace);
    let (namespace, name) = (identity.namespace.clone(), identity.name.clone());
    let account = match api.get_opt(&identity.name).await {
        Ok(Some(account)) => account,
        Ok(None) => return Err(ClaimError::Missing { namespace, name }),
        Err(source) => return Err(ClaimError::Read { namespace, name, source: Box::new(source) }),
    };
    identity.claimed_by(&account.metadata.labels.unwrap_or_default(), claim)
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
        let id = Identity::of_plugin("wasmloop", "podset", Role::Serving, None);
        assert_eq!(id.username(), "system:serviceaccount:wasmloop:wasmloop-plugin-podset");
        assert_eq!(id.groups(), ["system:serviceaccounts", "system:serviceaccounts:wasmloop", "system:authenticated"]);
        assert_eq!(Identity::of_plugin("ops", "podset", Role::Serving, Some("podsets")).to_string(), "system:serviceaccount:ops:podsets");
        assert_eq!(Identity::of_plugin("ops", "podset", Role::Candidate, None).name, "wasmloop-candidate-podset");
    }

    fn claim(plugin: &str, role: Role) -> Claim {
        Claim { plugin: plugin.into(), role }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn no_plugin_may_name_the_hosts_account_or_another_plugins_default() {
        let host = Identity { namespace: "wasmloop".into(), name: "wasmloop".into() };
        let hosts = [host.clone()];
        let podset = claim("podset", Role::Serving);
        let err = host.may_be(&podset, &hosts).unwrap_err();
        assert!(matches!(err, ClaimError::HostAccount { .. }), "{err}");
        assert!(err.to_string().contains("the host's own ServiceAccount") && err.to_string().contains("wasmloop-plugin-podset"));
        let webapps = Identity::of_plugin("wasmloop", "webapp", Role::Serving, None);
        let err = webapps.may_be(&podset, &hosts).unwrap_err();
        assert!(err.to_string().contains("default account of another plugin (plugin webapp)"), "{err}");
        // A candidate may not take the serving version's account, nor the reverse.
        let serving = Identity::of_plugin("wasmloop", "podset", Role::Serving, None);
        let err = serving.may_be(&claim("podset", Role::Candidate), &hosts).unwrap_err();
        assert!(err.to_string().contains("(plugin podset)"), "{err}");
        let candidate = Identity::of_plugin("wasmloop", "podset", Role::Candidate, None);
        assert!(candidate.may_be(&podset, &hosts).unwrap_err().to_string().contains("candidate version of plugin podset"));
        // Its own defaults, and accounts of other names, may be (if their labels claim them).
        assert!(serving.may_be(&podset, &hosts).is_ok());
        assert!(candidate.may_be(&claim("podset", Role::Candidate), &hosts).is_ok());
        let named = Identity::of_plugin("wasmloop", "podset", Role::Serving, Some("podsets"));
        assert!(named.may_be(&podset, &hosts).is_ok());
        assert!(host.may_be(&podset, &[]).is_ok(), "not known as the host's: the claim decides");
    }

    #[test]
    fn an_account_serves_only_the_plugin_its_labels_claim_it_for() {
        let id = Identity::of_plugin("wasmloop", "podset", Role::Serving, Some("shared"));
        let podset = claim("podset", Role::Serving);
        assert!(id.claimed_by(&labels(&[(CLAIM_LABEL, "podset")]), &podset).is_ok());
        let err = id.claimed_by(&labels(&[(CLAIM_LABEL, "webapp")]), &podset).unwrap_err();
        assert!(matches!(&err, ClaimError::ClaimedByOther { holder, .. } if holder.plugin == "webapp"), "{err}");
        assert!(!err.can_resolve(), "a conflict is refused, not waited for");
        let err = id.claimed_by(&labels(&[(CLAIM_LABEL, "podset"), (ROLE_LABEL, "candidate")]), &podset).unwrap_err();
        assert!(err.to_string().contains("candidate version of plugin podset"), "{err}");
        let err = id.claimed_by(&labels(&[]), &podset).unwrap_err();
        assert!(err.can_resolve(), "an unlabelled account can be labelled later");
        assert!(err.to_string().contains("kubectl -n wasmloop label serviceaccount shared wasmloop.dev/plugin-name=podset"), "{err}");
        let err = id.claimed_by(&labels(&[(CLAIM_LABEL, "podset"), (ROLE_LABEL, "admin")]), &podset).unwrap_err();
        assert!(matches!(err, ClaimError::Unclaimed { .. }), "an unknown role claims for nothing: {err}");
        let candidate = claim("podset", Role::Candidate);
        assert!(id.claimed_by(&labels(&[(CLAIM_LABEL, "podset"), (ROLE_LABEL, "candidate")]), &candidate).is_ok());
        assert_eq!(candidate.labels().len(), 2);
    }
}
