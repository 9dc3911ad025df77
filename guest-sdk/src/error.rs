//! Reconcile errors: transient (retried with backoff) or permanent (not retried).

use std::fmt;

use crate::outcome::Outcome;

/// Whether the host retries a failed reconcile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Retried with exponential backoff.
    Transient,
    /// Not retried until the object (or something mapped to it) changes.
    Permanent,
}

/// A failed reconcile.
///
/// `?` converts cache and JSON errors into transient errors; use [`Error::permanent`] for
/// problems only a change to the object can fix (an invalid spec, say). An error can carry
/// actions the host executes anyway ([`Error::with_actions`]): the Go pattern "record a Warning
/// Event or a status condition, return the error, retry with backoff".
#[derive(Clone, Debug, PartialEq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    actions: Option<Box<Outcome>>,
}

impl Error {
    /// An error worth retrying (a stale or incomplete cache, a conflict).
    pub fn transient(message: impl fmt::Display) -> Self {
        Self { kind: ErrorKind::Transient, message: message.to_string(), actions: None }
    }

    /// An error retrying will not fix; the key is reconciled again when its objects change.
    pub fn permanent(message: impl fmt::Display) -> Self {
        Self { kind: ErrorKind::Permanent, message: message.to_string(), actions: None }
    }

    /// Transient or permanent.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Whether the host retries it.
    pub fn is_transient(&self) -> bool {
        self.kind == ErrorKind::Transient
    }

    /// The message the host logs.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same error, with actions for the host to execute anyway (contract 0.3): Events,
    /// status or condition patches saying why. They are checked and admitted like an outcome's;
    /// the error still decides the retry (backoff, `last_error`, the error metrics). Its
    /// `requeue_after` is ignored: the error's retry applies.
    ///
    /// ```
    /// use wasmloop_sdk::{Error, EventType, Outcome, kinds};
    /// let foo = kinds::CONFIG_MAP.key(Some("shop"), "web");
    /// let err = Error::transient("quota exceeded")
    ///     .with_actions(Outcome::new().event_key(foo, EventType::Warning, "QuotaExceeded", "retrying"));
    /// assert_eq!(err.actions().map(|o| o.actions.len()), Some(1));
    /// ```
    pub fn with_actions(mut self, outcome: Outcome) -> Self {
        self.actions = Some(Box::new(outcome));
        self
    }

    /// The actions to execute anyway, if any.
    pub fn actions(&self) -> Option<&Outcome> {
        self.actions.as_deref()
    }

    /// Take the actions to execute anyway.
    pub fn take_actions(&mut self) -> Option<Outcome> {
        self.actions.take().map(|b| *b)
    }

    /// The error without its actions, and the actions to send: none if it has none, or if they
    /// are unusable (a builder refused an object), in which case the message says so. What the
    /// export glue (and a host running the plugin natively) sends.
    #[doc(hidden)]
    pub fn into_parts(mut self) -> (Self, Vec<crate::Action>) {
        match self.take_actions().map(Outcome::into_result) {
            None => (self, Vec::new()),
            Some(Ok(outcome)) => (self, outcome.actions),
            Some(Err(bad)) => {
                self.message = format!("{}; its actions were not sent: {}", self.message, bad.message);
                (self, Vec::new())
            }
        }
    }

    /// Prefix the message with what was being done: `"{context}: {message}"`.
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.message = format!("{context}: {}", self.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            ErrorKind::Transient => "transient",
            ErrorKind::Permanent => "permanent",
        };
        write!(f, "{kind}: {}", self.message)
    }
}

impl std::error::Error for Error {}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Self::transient(format!("JSON: {e}"))
    }
}

impl From<crate::cache::Error> for Error {
    fn from(e: crate::cache::Error) -> Self {
        Self::transient(e)
    }
}

/// `.context(..)` on results whose error converts into [`Error`].
pub trait ResultExt<T> {
    /// Convert the error into an [`Error`] and prefix it with `context`.
    fn context(self, context: impl fmt::Display) -> Result<T, Error>;
    /// Convert the error into a permanent [`Error`] (e.g. a spec that does not parse).
    fn permanent(self) -> Result<T, Error>;
}

impl<T, E: Into<Error>> ResultExt<T> for Result<T, E> {
    fn context(self, context: impl fmt::Display) -> Result<T, Error> {
        self.map_err(|e| e.into().context(context))
    }

    fn permanent(self) -> Result<T, Error> {
        self.map_err(|e| {
            let mut e = e.into();
            e.kind = ErrorKind::Permanent;
            e
        })
    }
}

/// Where an outcome meets the error: [`Outcome::into_result`] lives beside [`Error`] so that
/// `outcome` needs nothing of this module (an [`Error`] carries an [`Outcome`], not the reverse).
impl Outcome {
    /// `Ok(self)`, or a permanent error if a builder was given an unusable object. The SDK calls
    /// this on every returned outcome (and so does `testing`), so the first problem surfaces as
    /// the reconcile's error.
    pub fn into_result(self) -> Result<Self, Error> {
        match self.problem() {
            Some(problem) => Err(Error::permanent(format!("invalid action: {problem}"))),
            None => Ok(self),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_errors_become_transient_with_context() {
        fn parse() -> Result<serde_json::Value, Error> {
            let v = serde_json::from_str::<serde_json::Value>("{").context("reading PodSet")?;
            Ok(v)
        }
        let e = parse().unwrap_err();
        assert!(e.is_transient());
        assert!(e.message().starts_with("reading PodSet: JSON: EOF"), "{e}");
    }

    #[test]
    fn permanent_conversion_and_display() {
        let r: Result<(), serde_json::Error> = serde_json::from_str::<()>("x");
        let e = r.permanent().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Permanent);
        assert!(e.to_string().starts_with("permanent: JSON:"), "{e}");
        assert_eq!(Error::transient("boom").to_string(), "transient: boom");
    }
}
