//! [`Verb`]: what a plugin may do to objects of a kind, and what each of its actions does.
//!
//! One vocabulary for grants (`plugin.yaml`), admission refusals, logs, metrics labels and the
//! docs: an action's verb is the grant it needs, so a refusal never says "patch" of an apply.

use std::fmt;
use std::str::FromStr;

/// A verb of the grants vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verb {
    /// get/list/watch, through the host's cache.
    Read,
    /// Create an object.
    Create,
    /// Server-side apply.
    Apply,
    /// JSON merge patch or JSON patch of an object (not its status: that is `UpdateStatus`).
    Patch,
    /// Delete an object.
    Delete,
    /// Write an object's `/status` subresource.
    UpdateStatus,
    /// Record an Event about an object.
    Event,
}

/// A verb that is not one of the vocabulary's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid verb {0:?}: expected one of read, create, apply, patch, delete, update-status, event")]
pub struct UnknownVerb(pub String);

impl Verb {
    /// Every verb, in the order the docs list them.
    pub const ALL: [Verb; 7] = [Verb::Read, Verb::Create, Verb::Apply, Verb::Patch, Verb::Delete, Verb::UpdateStatus, Verb::Event];

    /// The verb as written in `plugin.yaml`, refusals, logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Read => "read",
            Verb::Create => "create",
            Verb::Apply => "apply",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::UpdateStatus => "update-status",
            Verb::Event => "event",
        }
    }

    /// Whether the verb changes the object it targets (an Event is a new object about it).
    pub fn writes_target(self) -> bool {
        !matches!(self, Verb::Read | Verb::Event)
    }
}

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Verb {
    type Err = UnknownVerb;
    fn from_str(s: &str) -> Result<Self, UnknownVerb> {
        let s = s.trim();
        Verb::ALL.into_iter().find(|v| v.as_str() == s).ok_or_else(|| UnknownVerb(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_round_trip_through_their_names() {
        for verb in Verb::ALL {
            assert_eq!(verb.as_str().parse::<Verb>(), Ok(verb));
            assert_eq!(verb.to_string(), verb.as_str());
        }
        assert_eq!(" apply ".parse::<Verb>(), Ok(Verb::Apply));
        assert_eq!("write".parse::<Verb>().unwrap_err().to_string(), UnknownVerb("write".into()).to_string());
        assert!("*".parse::<Verb>().is_err(), "the wildcard belongs to grants, not to the vocabulary");
    }

    #[test]
    fn only_writes_of_the_target_write_it() {
        assert!(Verb::Apply.writes_target() && Verb::Delete.writes_target() && Verb::UpdateStatus.writes_target());
        assert!(!Verb::Event.writes_target() && !Verb::Read.writes_target());
    }
}
