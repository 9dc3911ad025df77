//! Reconcile errors: transient (retried with backoff) or permanent (not retried).

use std::fmt;

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
/// problems only a change to the object can fix (an invalid spec, say).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// An error worth retrying (a stale or incomplete cache, a conflict).
    pub fn transient(message: impl fmt::Display) -> Self {
        Self { kind: ErrorKind::Transient, message: message.to_string() }
    }

    /// An error retrying will not fix; the key is reconciled again when its objects change.
    pub fn permanent(message: impl fmt::Display) -> Self {
        Self { kind: ErrorKind::Permanent, message: message.to_string() }
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
