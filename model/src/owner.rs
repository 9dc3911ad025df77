//! Owner references: which one is an object's controller, and how a child is given its owner
//! (the SDKs' `owned` children) — in the owner's namespace, with one controller.

use serde_json::{Map, Value};

/// Why a child cannot be given its owner.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdoptError {
    /// The child (`child`), or its metadata (`child metadata`), is not a JSON object.
    #[error("{0} is not a JSON object")]
    NotAnObject(&'static str),
    /// The child's ownerReferences are not a list.
    #[error("child ownerReferences is not an array")]
    OwnerReferencesNotAList,
    /// The child names a namespace other than its owner's (owner references do not cross
    /// namespaces: the garbage collector would delete the child).
    #[error("child in namespace {child:?} cannot be owned by an object in {owner:?}")]
    OtherNamespace {
        /// The child's namespace.
        child: String,
        /// The owner's.
        owner: String,
    },
    /// The child already has a controller with another uid.
    #[error("child already has a controller: {0}")]
    OtherController(String),
}

impl AdoptError {
    /// A stable name of the kind of error, as the conformance corpus records it.
    pub fn kind(&self) -> &'static str {
        match self {
            AdoptError::NotAnObject(_) | AdoptError::OwnerReferencesNotAList => "shape",
            AdoptError::OtherNamespace { .. } => "other_namespace",
            AdoptError::OtherController(_) => "other_controller",
        }
    }
}

/// The owner reference of `object` marked `controller: true` (the first, if several are).
pub fn controller(object: &Value) -> Option<&Value> {
    object.get("metadata")?.get("ownerReferences")?.as_array()?.iter().find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
}

/// `child` in `owner_namespace` (when it names none) with `owner_ref` as its controller; an error
/// if it is in another namespace or already has another controller (one with the same uid is
/// kept as it is).
pub fn adopt(mut child: Value, owner_namespace: Option<&str>, owner_ref: &Value) -> Result<Value, AdoptError> {
    let obj = child.as_object_mut().ok_or(AdoptError::NotAnObject("child"))?;
    let meta = obj.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    let meta = meta.as_object_mut().ok_or(AdoptError::NotAnObject("child metadata"))?;
    if let Some(owner) = owner_namespace {
        match meta.get("namespace").and_then(Value::as_str) {
            None => {
                meta.insert("namespace".into(), owner.into());
            }
            Some(ns) if ns != owner => return Err(AdoptError::OtherNamespace { child: ns.to_owned(), owner: owner.to_owned() }),
            Some(_) => {}
        }
    }
    let refs = meta.entry("ownerReferences").or_insert_with(|| Value::Array(Vec::new()));
    let refs = refs.as_array_mut().ok_or(AdoptError::OwnerReferencesNotAList)?;
    if let Some(other) = refs.iter().find(|r| r.get("controller").and_then(Value::as_bool) == Some(true)) {
        if other.get("uid") != owner_ref.get("uid") {
            return Err(AdoptError::OtherController(other.to_string()));
        }
        return Ok(child);
    }
    refs.push(owner_ref.clone());
    Ok(child)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn children_join_their_owner_namespace_and_keep_one_controller() {
        let owner = json!({"uid": "u1", "controller": true});
        let child = adopt(json!({"metadata": {"name": "c"}}), Some("a"), &owner).unwrap();
        assert_eq!(child, json!({"metadata": {"name": "c", "namespace": "a", "ownerReferences": [owner]}}));
        assert_eq!(controller(&child), Some(&owner));
        assert_eq!(adopt(child.clone(), Some("a"), &owner), Ok(child), "the same controller again is no change");
        let err = adopt(json!({"metadata": {"namespace": "b"}}), Some("a"), &owner).unwrap_err();
        assert_eq!(err.kind(), "other_namespace");
        let taken = json!({"metadata": {"ownerReferences": [{"uid": "u2", "controller": true}]}});
        assert_eq!(adopt(taken, None, &owner).unwrap_err().kind(), "other_controller");
    }
}
