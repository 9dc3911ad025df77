//! Owner references a write adds: each must name an object the plugin may read, with the uid
//! the host's cache holds, so no plugin adopts, or garbage-collects through, an object it
//! cannot see. References the object already had (before the write) are not the plugin's doing.

use serde_json::Value;
use wasmloop_model::Target;

use super::result::Effect;
use super::{Context, Scopes, Violation};
use crate::kinds::KindRef;

/// Check every owner reference `effect` adds to `target`.
pub(super) async fn check_added(scopes: &Scopes, ctx: Context<'_>, target: &Target, effect: &Effect) -> Result<(), Violation> {
    let Some(after) = effect.after.value() else { return Ok(()) };
    // Absent, or null in a merge patch (removing them all), adds no owner.
    let Some(refs) = after.pointer("/metadata/ownerReferences").filter(|r| !r.is_null()) else { return Ok(()) };
    let Some(refs) = refs.as_array() else {
        return Err(Violation::OwnerReference { index: 0, why: "ownerReferences must be a list".into() });
    };
    let had = |uid: &str| {
        let before = effect.before.as_ref().and_then(|b| b.pointer("/metadata/ownerReferences")).and_then(Value::as_array);
        before.into_iter().flatten().any(|r| r.get("uid").and_then(Value::as_str) == Some(uid))
    };
    for (index, r) in refs.iter().enumerate() {
        let bad = |why: String| Violation::OwnerReference { index, why };
        let field = |f: &str| r.get(f).and_then(Value::as_str).filter(|s| !s.is_empty());
        let (Some(api_version), Some(kind), Some(name), Some(uid)) = (field("apiVersion"), field("kind"), field("name"), field("uid"))
        else {
            return Err(bad("apiVersion, kind, name and uid are required".into()));
        };
        if had(uid) {
            continue;
        }
        let owner = KindRef::new(api_version, kind);
        // Owners are in the dependent's namespace, or cluster-scoped.
        let namespace = match scopes.namespaced(&owner).await? {
            Some(false) => None,
            _ if target.namespace.is_none() => None,
            _ => target.namespace.as_deref(),
        };
        let described = match namespace {
            Some(ns) => format!("{owner} {ns}/{name}"),
            None => format!("{owner} {name}"),
        };
        if !ctx.grants.allows_read(&owner, namespace) {
            return Err(bad(format!("owner {described}: the plugin may not read it")));
        }
        match ctx.cache.get(&owner, namespace, name) {
            Ok(Some(cached)) if cached.uid() == uid => {}
            Ok(Some(cached)) => {
                return Err(bad(format!("owner {described} has uid {} in the cache, the reference says {uid}", cached.uid())));
            }
            Ok(None) => return Err(bad(format!("owner {described} is not in the plugin's cache"))),
            Err(e) => return Err(bad(format!("owner {described}: {e}"))),
        }
    }
    Ok(())
}
