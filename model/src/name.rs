//! The name rules of Kubernetes that the host, the SDK and the CLI apply: DNS labels (namespaces,
//! plugin names), DNS subdomains (API groups, most object names) and request-path segments
//! (what an object name may be in a URL). One definition each, as `k8s.io/apimachinery`'s
//! `validation` package has them.

/// Why a name breaks a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Empty.
    #[error("is empty")]
    Empty,
    /// Longer than the rule allows.
    #[error("is longer than {0} characters")]
    TooLong(usize),
    /// A character outside `a-z`, `0-9` and `-` (and `.` between labels of a subdomain).
    #[error("may contain only lowercase letters, digits and '-'{}", if *.0 { " and '.'" } else { "" })]
    Characters(bool),
    /// Starts or ends with `-` (or `.`).
    #[error("must start and end with a lowercase letter or digit")]
    Edges,
    /// `.` or `..`.
    #[error("`.` and `..` are not names")]
    Dots,
    /// A `/`: a path separator (a subresource, say).
    #[error("may not contain '/' (subresources are not action targets)")]
    Slash,
    /// A `%`: an escape in a URL path.
    #[error("may not contain '%'")]
    Percent,
    /// Whitespace or a control character.
    #[error("may not contain whitespace or control characters")]
    Whitespace,
}

impl NameError {
    /// A stable name of the rule broken, as the conformance corpus records it.
    pub fn kind(&self) -> &'static str {
        match self {
            NameError::Empty => "empty",
            NameError::TooLong(_) => "too_long",
            NameError::Characters(_) => "characters",
            NameError::Edges => "edges",
            NameError::Dots => "dots",
            NameError::Slash => "slash",
            NameError::Percent => "percent",
            NameError::Whitespace => "whitespace",
        }
    }
}

/// The result of a name check.
pub type Result<T = (), E = NameError> = std::result::Result<T, E>;

/// Most characters of a DNS label (RFC 1123).
pub const DNS_LABEL_MAX: usize = 63;
/// Most characters of a DNS subdomain (RFC 1123).
pub const DNS_SUBDOMAIN_MAX: usize = 253;

/// An RFC 1123 label of at most `max` characters: `a-z`, `0-9`, `-`, not at either end
/// (namespaces, plugin names, API versions).
pub fn dns_label(s: &str, max: usize) -> Result {
    let b = s.as_bytes();
    if b.is_empty() {
        return Err(NameError::Empty);
    }
    if b.len() > max {
        return Err(NameError::TooLong(max));
    }
    if !b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-') {
        return Err(NameError::Characters(false));
    }
    if b[0] == b'-' || b[b.len() - 1] == b'-' {
        return Err(NameError::Edges);
    }
    Ok(())
}

/// An RFC 1123 subdomain: DNS labels joined by `.`, at most 253 characters (API groups,
/// ConfigMap names).
pub fn dns_subdomain(s: &str) -> Result {
    if s.is_empty() {
        return Err(NameError::Empty);
    }
    if s.len() > DNS_SUBDOMAIN_MAX {
        return Err(NameError::TooLong(DNS_SUBDOMAIN_MAX));
    }
    for label in s.split('.') {
        dns_label(label, DNS_LABEL_MAX).map_err(|e| match e {
            NameError::Characters(_) => NameError::Characters(true),
            NameError::Empty => NameError::Edges,
            other => other,
        })?;
    }
    Ok(())
}

/// What the API server accepts as one segment of a request path, plus no whitespace or control
/// characters (no kind allows them in names), of at most `max` characters. Dotted names
/// (`a.b.c`) are fine; `.` and `..` alone are not.
pub fn path_segment(s: &str, max: usize) -> Result {
    if s.is_empty() {
        return Err(NameError::Empty);
    }
    if s == "." || s == ".." {
        return Err(NameError::Dots);
    }
    if s.contains('/') {
        return Err(NameError::Slash);
    }
    if s.contains('%') {
        return Err(NameError::Percent);
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(NameError::Whitespace);
    }
    if s.len() > max {
        return Err(NameError::TooLong(max));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(dns_label("team-a", 63), Ok(()));
        assert_eq!(dns_label("a", 63), Ok(()));
        assert_eq!(dns_label("", 63), Err(NameError::Empty));
        assert_eq!(dns_label("-a", 63), Err(NameError::Edges));
        assert_eq!(dns_label("a-", 63), Err(NameError::Edges));
        assert_eq!(dns_label("A", 63), Err(NameError::Characters(false)));
        assert_eq!(dns_label("a.b", 63), Err(NameError::Characters(false)));
        assert_eq!(dns_label(&"a".repeat(64), 63), Err(NameError::TooLong(63)));
    }

    #[test]
    fn subdomains() {
        assert_eq!(dns_subdomain("apps"), Ok(()));
        assert_eq!(dns_subdomain("rbac.authorization.k8s.io"), Ok(()));
        assert_eq!(dns_subdomain("a..b"), Err(NameError::Edges));
        assert_eq!(dns_subdomain(".a"), Err(NameError::Edges));
        assert_eq!(dns_subdomain("a_b"), Err(NameError::Characters(true)));
        assert_eq!(dns_subdomain(&"a.".repeat(127)), Err(NameError::TooLong(253)));
        assert_eq!(NameError::Characters(true).to_string(), "may contain only lowercase letters, digits and '-' and '.'");
    }

    #[test]
    fn path_segments() {
        assert_eq!(path_segment("web.v1.example", 253), Ok(()));
        assert_eq!(path_segment("system:x", 253), Ok(()));
        assert_eq!(path_segment("..", 253), Err(NameError::Dots));
        assert_eq!(path_segment("p/status", 253), Err(NameError::Slash));
        assert_eq!(path_segment("a%2Fb", 253), Err(NameError::Percent));
        assert_eq!(path_segment("a b", 253), Err(NameError::Whitespace));
        assert_eq!(path_segment("", 253), Err(NameError::Empty));
        assert_eq!(path_segment("abc", 2), Err(NameError::TooLong(2)));
    }
}
