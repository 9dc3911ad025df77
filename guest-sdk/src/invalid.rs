//! [`InvalidObject`]: why an object given to an outcome builder cannot make an action. The
//! builders record it as the outcome's problem (the reconcile then fails, naming the builder and
//! this), so a plugin never sends the host an action it would refuse.

use crate::types::ObjectKey;

/// Why an object cannot make an action.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidObject {
    /// It does not serialize to JSON.
    #[error("{what} does not serialize: {error}")]
    NotSerializable {
        /// Which object (`object`, `owner`, `child`, `patch`, `parent`).
        what: &'static str,
        /// serde's message.
        error: String,
    },
    /// A required string field is missing or empty.
    #[error("object has no {0}")]
    NoField(&'static str),
    /// It has no `metadata.name`.
    #[error("{kind} has no metadata.name")]
    NoName {
        /// Its kind.
        kind: String,
    },
    /// A create with neither a name nor a generateName.
    #[error("object has neither metadata.name nor metadata.generateName")]
    Unnamed,
    /// The owner is unusable.
    #[error("owner: {0}")]
    Owner(Box<InvalidObject>),
    /// The owner has no uid (it was not read from the cache).
    #[error("owner {0} has no metadata.uid")]
    OwnerWithoutUid(ObjectKey),
    /// An owner without the fields an owner reference needs.
    #[error("the owner needs apiVersion, kind, metadata.name and metadata.uid")]
    IncompleteOwner,
    /// A part that must be a JSON object is not (`child`, `metadata`, ...).
    #[error("{0} is not a JSON object")]
    NotAnObject(&'static str),
    /// The child's `ownerReferences` is not a list.
    #[error("child ownerReferences is not an array")]
    OwnerReferencesNotAList,
    /// A child in another namespace than its owner's.
    #[error("child in namespace {child:?} cannot be owned by an object in {owner:?}")]
    OtherNamespace {
        /// The child's namespace.
        child: String,
        /// The owner's.
        owner: String,
    },
    /// A child that already has another controller (its reference).
    #[error("child already has a controller: {0}")]
    OtherController(String),
    /// An object to adopt that already has a controller.
    #[error("{0} already has a controller")]
    AlreadyControlled(ObjectKey),
    /// A desired child of another kind than declared.
    #[error("{field} is {found}, not {want:?}")]
    OtherKind {
        /// `apiVersion` or `kind`.
        field: &'static str,
        /// What the child has.
        found: String,
        /// What the kind says.
        want: String,
    },
    /// A desired child without a name.
    #[error("no metadata.name (children need stable names)")]
    ChildWithoutName,
    /// The parent of children is unusable.
    #[error("parent: {0}")]
    Parent(Box<InvalidObject>),
}

impl InvalidObject {
    /// `what` did not serialize.
    pub(crate) fn serde(what: &'static str, error: impl std::fmt::Display) -> Self {
        InvalidObject::NotSerializable { what, error: error.to_string() }
    }
}
