//! What a plugin acts as and may read, checked at load ([`identity_of`]): an identity claimed
//! for it alone, never one the host runs as, that the API server lets list and watch everything
//! the plugin reads.

use super::manifest::PluginManifest;
use super::waiting::{NotLoaded, WaitReason};
use crate::controller::{ReadScopeError, Shared, read_namespaces};
use crate::identity::{self, Claim, Identity, Role};
use crate::kinds::ObjectKey;
use crate::plugin::WasmPlugin;
use crate::reconciler::Reconciler as _;

/// The identity `plugin`'s writes will carry, loaded from `key`: the manifest's
/// `serviceAccountName` (default `wasmloop-plugin-<name>`, a candidate's
/// `wasmloop-candidate-<name>`), once the account is claimed for it (label
/// `wasmloop.dev/plugin-name`), is not the host's, and may list and watch what the plugin reads.
/// A claim naming someone else, or the host's account, is a refusal; a missing account, claim or
/// RBAC is a wait (they can be created after the plugin is applied).
pub(super) async fn identity_of(
    shared: &Shared,
    client: &kube::Client,
    key: &ObjectKey,
    plugin: &WasmPlugin,
    manifest: &PluginManifest,
) -> Result<Identity, NotLoaded> {
    let namespace = key.namespace.as_deref().ok_or_else(|| NotLoaded::Refused("a plugin ConfigMap has a namespace".into()))?;
    let role = if manifest.shadow_of.is_some() { Role::Candidate } else { Role::Serving };
    let identity = Identity::of_plugin(namespace, &manifest.local_name, role, manifest.service_account.as_deref());
    let claim = Claim { plugin: manifest.local_name.clone(), role };
    let hosts: Vec<Identity> = shared
        .admission
        .protected()
        .service_account()
        .map(|(namespace, name)| Identity { namespace: namespace.to_owned(), name: name.to_owned() })
        .into_iter()
        .collect();
    identity::check_claim(client, &identity, &claim, &hosts).await.map_err(|e| {
        if e.can_resolve() {
            NotLoaded::Waiting(WaitReason::IdentityNotClaimed { identity: identity.to_string(), detail: e.to_string() })
        } else {
            NotLoaded::Refused(e.to_string())
        }
    })?;
    let resolver = shared.registry.resolver();
    let mut reads = Vec::new();
    for kind in plugin.spec().kinds() {
        let discovery_failed = |error: String| WaitReason::DiscoveryFailed { kind: kind.clone(), error };
        let namespaces =
            read_namespaces(resolver, plugin.grants(), &kind, manifest.controller.namespace.as_deref()).await.map_err(|e| match e {
                ReadScopeError::Scope(why) => NotLoaded::Refused(format!("cannot read {kind}: {why}")),
                ReadScopeError::Kind(e) => discovery_failed(e.to_string()).into(),
            })?;
        let resolved = resolver.resolve(&kind).await.map_err(|e| discovery_failed(e.to_string()))?;
        reads.extend(namespaces.into_iter().map(|namespace| identity::Read { kind: resolved.clone(), namespace }));
    }
    identity::check_reads(client, &identity, &reads)
        .await
        .map_err(|e| WaitReason::ReadsNotAuthorized { identity: identity.to_string(), detail: e.to_string() })?;
    Ok(identity)
}
