//! Kubernetes label selectors: `app=web,tier!=db,env in (a,b),!legacy`, parsed and matched the
//! same way by the host's cache and by the SDK's test fake.
//!
//! Hand-written rather than wrapping `kube::core::Selector`: kube-core 5 has no string parser
//! (it builds selectors from `LabelSelector` structs) and matches only against an owned
//! `BTreeMap<String, String>`, which would mean allocating a label map per object per match.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde_json::Value;

/// A selector that does not parse: which one, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?}: {reason}")]
pub struct Error {
    /// The selector as given.
    pub selector: String,
    /// What is wrong with it.
    pub reason: Reason,
}

/// What is wrong with a selector.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reason {
    /// `<`, `>`: set-based and equality operators only.
    #[error("operator `{0}` is not supported in label selectors")]
    UnsupportedOperator(char),
    /// Anything else the grammar does not allow (`app web`, `a=b,`, `x in (`): what was found.
    #[error("{0}")]
    Syntax(String),
    /// A label key that is not `[prefix/]name`.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A label value that is not 0-63 characters `[A-Za-z0-9-_.]`, alphanumeric at both ends.
    #[error("invalid value `{value}` for `{key}`: at most 63 characters [A-Za-z0-9-_.], starting and ending with an alphanumeric")]
    Value {
        /// The key the value is for.
        key: String,
        /// The value.
        value: String,
    },
}

impl Reason {
    /// A stable name of the kind of error (`operator`, `syntax`, `key`, `value`): what the
    /// conformance corpus records, as every language's fake reports it.
    pub fn kind(&self) -> &'static str {
        match self {
            Reason::UnsupportedOperator(_) => "operator",
            Reason::Syntax(_) => "syntax",
            Reason::Key(_) => "key",
            Reason::Value { .. } => "value",
        }
    }

    /// The offending key (for `key`) or value (for `value`).
    pub fn at(&self) -> Option<&str> {
        match self {
            Reason::Key(KeyError::Prefix(k) | KeyError::Name(k)) => Some(k),
            Reason::Value { value, .. } => Some(value),
            Reason::UnsupportedOperator(_) | Reason::Syntax(_) => None,
        }
    }
}

/// A label key that is not `[prefix/]name`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The prefix is not a lowercase DNS subdomain.
    #[error("invalid label key `{0}`: the prefix must be a lowercase DNS subdomain")]
    Prefix(String),
    /// The name is not 1-63 characters `[A-Za-z0-9-_.]`, alphanumeric at both ends.
    #[error("invalid label key `{0}`: the name must be 1-63 characters [A-Za-z0-9-_.], starting and ending with an alphanumeric")]
    Name(String),
}

/// The result of parsing a selector.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a selector is matched against: an object's labels.
pub trait Labels {
    /// The value of label `key`, if the object has it.
    fn label(&self, key: &str) -> Option<&str>;
}

impl<T: Labels + ?Sized> Labels for &T {
    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }
}

impl<T: Labels + ?Sized> Labels for std::sync::Arc<T> {
    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }
}

/// A Kubernetes object as JSON: its `metadata.labels`.
impl Labels for Value {
    fn label(&self, key: &str) -> Option<&str> {
        self.get("metadata")?.get("labels")?.get(key)?.as_str()
    }
}

/// A value of an index by label: `key=value` (neither a label key nor a value contains `=`).
pub fn label_pair(key: &str, value: &str) -> String {
    format!("{key}={value}")
}

/// A parsed label selector. The empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Selector {
    /// Sorted and deduplicated, so equal selectors compare and display equal.
    reqs: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Requirement {
    key: String,
    op: Op,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Op {
    Exists,
    NotExists,
    Eq(String),
    NotEq(String),
    In(BTreeSet<String>),
    NotIn(BTreeSet<String>),
}

impl Selector {
    /// The selector that matches every object.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Parse `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, comma-separated.
    pub fn parse(selector: &str) -> Result<Self> {
        let err = |reason: Reason| Error { selector: selector.into(), reason };
        let tokens = tokenize(selector).map_err(err)?;
        let mut reqs = Vec::new();
        let mut p = Parser { tokens: &tokens, pos: 0 };
        if !tokens.is_empty() {
            loop {
                reqs.push(p.requirement().map_err(err)?);
                match p.next() {
                    None => break,
                    Some(Tok::Comma) if p.peek().is_none() => {
                        return Err(err(syntax("trailing comma")));
                    }
                    Some(Tok::Comma) => {}
                    Some(t) => return Err(err(syntax(format!("expected `,` or the end, found {t}")))),
                }
            }
        }
        reqs.sort();
        reqs.dedup();
        Ok(Self { reqs })
    }

    /// True if this selector matches every object.
    pub fn is_everything(&self) -> bool {
        self.reqs.is_empty()
    }

    /// For each `key=value` and `key in (…)` requirement, the `key=value` pairs ([`label_pair`])
    /// one of which an object must carry to match: what an index by label can look up.
    pub fn required_pairs(&self) -> impl Iterator<Item = Vec<String>> + '_ {
        self.reqs.iter().filter_map(|r| match &r.op {
            Op::Eq(v) => Some(vec![label_pair(&r.key, v)]),
            Op::In(vs) => Some(vs.iter().map(|v| label_pair(&r.key, v)).collect()),
            _ => None,
        })
    }

    /// Whether `obj`'s labels satisfy every requirement.
    pub fn matches(&self, obj: &(impl Labels + ?Sized)) -> bool {
        self.matches_with(|k| obj.label(k))
    }

    /// Whether the labels given by `label` (key → value) satisfy every requirement.
    pub fn matches_with<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.reqs.iter().all(|r| {
            let v = label(&r.key);
            match &r.op {
                Op::Exists => v.is_some(),
                Op::NotExists => v.is_none(),
                Op::Eq(want) => v == Some(want.as_str()),
                Op::NotEq(want) => v != Some(want.as_str()),
                Op::In(set) => v.is_some_and(|v| set.contains(v)),
                Op::NotIn(set) => v.is_none_or(|v| !set.contains(v)),
            }
        })
    }
}

impl FromStr for Selector {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

/// The canonical form: requirements sorted by key, `=` for equality, sets sorted, no spaces
/// except around `in`/`notin`. Parsing it gives the same selector.
impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.reqs.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let k = &r.key;
            match &r.op {
                Op::Exists => write!(f, "{k}")?,
                Op::NotExists => write!(f, "!{k}")?,
                Op::Eq(v) => write!(f, "{k}={v}")?,
                Op::NotEq(v) => write!(f, "{k}!={v}")?,
                Op::In(set) => write!(f, "{k} in ({})", join(set))?,
                Op::NotIn(set) => write!(f, "{k} notin ({})", join(set))?,
            }
        }
        Ok(())
    }
}

fn join(set: &BTreeSet<String>) -> String {
    set.iter().map(String::as_str).collect::<Vec<_>>().join(",")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok<'a> {
    Word(&'a str),
    Not,
    Eq,
    NotEq,
    Open,
    Close,
    Comma,
}

impl fmt::Display for Tok<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Word(w) => write!(f, "`{w}`"),
            Tok::Not => f.write_str("`!`"),
            Tok::Eq => f.write_str("`=`"),
            Tok::NotEq => f.write_str("`!=`"),
            Tok::Open => f.write_str("`(`"),
            Tok::Close => f.write_str("`)`"),
            Tok::Comma => f.write_str("`,`"),
        }
    }
}

fn tokenize(s: &str) -> Result<Vec<Tok<'_>>, Reason> {
    let special = |c: char| c.is_whitespace() || "!=(),<>".contains(c);
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        let (tok, len) = match c {
            c if c.is_whitespace() => (None, c.len_utf8()),
            '(' => (Some(Tok::Open), 1),
            ')' => (Some(Tok::Close), 1),
            ',' => (Some(Tok::Comma), 1),
            '=' if rest.starts_with("==") => (Some(Tok::Eq), 2),
            '=' => (Some(Tok::Eq), 1),
            '!' if rest.starts_with("!=") => (Some(Tok::NotEq), 2),
            '!' => (Some(Tok::Not), 1),
            '<' | '>' => return Err(Reason::UnsupportedOperator(c)),
            _ => {
                let len = rest.find(special).unwrap_or(rest.len());
                (rest.get(..len).map(Tok::Word), len)
            }
        };
        out.extend(tok);
        rest = rest.get(len..).unwrap_or_default();
    }
    Ok(out)
}

struct Parser<'t, 'a> {
    tokens: &'t [Tok<'a>],
    pos: usize,
}

impl<'a> Parser<'_, 'a> {
    fn peek(&self) -> Option<Tok<'a>> {
        self.tokens.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<Tok<'a>> {
        let t = self.peek();
        self.pos += 1;
        t
    }

    fn requirement(&mut self) -> Result<Requirement, Reason> {
        if self.peek() == Some(Tok::Not) {
            self.pos += 1;
            let key = self.key()?;
            return Ok(Requirement { key, op: Op::NotExists });
        }
        let key = self.key()?;
        let op = match self.peek() {
            None | Some(Tok::Comma) => Op::Exists,
            Some(Tok::Eq) => {
                self.pos += 1;
                Op::Eq(self.value(&key)?)
            }
            Some(Tok::NotEq) => {
                self.pos += 1;
                Op::NotEq(self.value(&key)?)
            }
            Some(Tok::Word("in")) => {
                self.pos += 1;
                Op::In(self.set(&key)?)
            }
            Some(Tok::Word("notin")) => {
                self.pos += 1;
                Op::NotIn(self.set(&key)?)
            }
            Some(t) => {
                return Err(syntax(format!(
                    "after key `{key}` expected `=`, `==`, `!=`, `in`, `notin`, `,` \
                     or the end, found {t}"
                )));
            }
        };
        Ok(Requirement { key, op })
    }

    fn key(&mut self) -> Result<String, Reason> {
        match self.next() {
            Some(Tok::Word(k)) => {
                validate_key(k)?;
                Ok(k.to_string())
            }
            Some(Tok::Comma) => Err(syntax("empty requirement (two commas in a row?)")),
            Some(t) => Err(syntax(format!("expected a label key, found {t}"))),
            None => Err(syntax("expected a label key, found the end")),
        }
    }

    /// The value after `=`/`!=`; empty when followed by `,` or the end (`k=` means `k` is "").
    fn value(&mut self, key: &str) -> Result<String, Reason> {
        match self.peek() {
            Some(Tok::Word(v)) => {
                self.pos += 1;
                validate_value(key, v)?;
                Ok(v.to_string())
            }
            None | Some(Tok::Comma) => Ok(String::new()),
            Some(t) => Err(syntax(format!("expected a value for `{key}`, found {t}"))),
        }
    }

    /// `(a,b)` after `in`/`notin`; at least one value.
    fn set(&mut self, key: &str) -> Result<BTreeSet<String>, Reason> {
        if self.next() != Some(Tok::Open) {
            return Err(syntax(format!("expected `(` after `in`/`notin` for `{key}`")));
        }
        let mut set = BTreeSet::new();
        let mut expect_value = true;
        loop {
            match self.next() {
                Some(Tok::Word(v)) if expect_value => {
                    validate_value(key, v)?;
                    set.insert(v.to_string());
                    expect_value = false;
                }
                Some(Tok::Comma) => {
                    if expect_value {
                        return Err(syntax(format!("empty value in the set for `{key}`")));
                    }
                    expect_value = true;
                }
                Some(Tok::Close) if set.is_empty() => {
                    return Err(syntax(format!("the set for `{key}` needs at least one value")));
                }
                Some(Tok::Close) if expect_value => {
                    return Err(syntax(format!("empty value in the set for `{key}`")));
                }
                Some(Tok::Close) => return Ok(set),
                Some(t) => return Err(syntax(format!("unexpected {t} in the set for `{key}`"))),
                None => return Err(syntax(format!("missing `)` after the set for `{key}`"))),
            }
        }
    }
}

/// A label key: `[prefix/]name`, prefix a DNS subdomain (≤ 253), name ≤ 63 alphanumerics
/// plus `-_.` inside.
pub fn validate_key(key: &str) -> Result<(), KeyError> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= 253
            && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && p.split('.')
                .all(|part| part.starts_with(|c: char| c.is_ascii_alphanumeric()) && part.ends_with(|c: char| c.is_ascii_alphanumeric()));
        if !ok {
            return Err(KeyError::Prefix(key.to_owned()));
        }
    }
    if name.is_empty() || !is_label_name(name) {
        return Err(KeyError::Name(key.to_owned()));
    }
    Ok(())
}

fn validate_value(key: &str, value: &str) -> Result<(), Reason> {
    if value.is_empty() || is_label_name(value) { Ok(()) } else { Err(Reason::Value { key: key.to_owned(), value: value.to_owned() }) }
}

fn syntax(what: impl Into<String>) -> Reason {
    Reason::Syntax(what.into())
}

fn is_label_name(s: &str) -> bool {
    s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn matches(sel: &str, labels: &[(&str, &str)]) -> bool {
        let map: HashMap<&str, &str> = labels.iter().copied().collect();
        Selector::parse(sel).unwrap().matches_with(|k| map.get(k).copied())
    }

    fn reason(sel: &str) -> String {
        match Selector::parse(sel) {
            Err(Error { selector, reason }) => {
                assert_eq!(selector, sel);
                reason.to_string()
            }
            other => panic!("{sel:?} parsed: {other:?}"),
        }
    }

    #[test]
    fn parses_every_operator_into_canonical_form() {
        let cases = [
            ("", ""),
            ("   ", ""),
            ("app=web", "app=web"),
            ("app==web", "app=web"),
            ("  app = web ,tier!=db", "app=web,tier!=db"),
            ("tier notin (b, a),app in (x)", "app in (x),tier notin (a,b)"),
            ("!legacy,app", "app,!legacy"),
            ("app=web,app=web", "app=web"),
            ("app=", "app="),
            ("example.com/team in (a-1,b.2)", "example.com/team in (a-1,b.2)"),
        ];
        for (input, canonical) in cases {
            let sel = Selector::parse(input).unwrap();
            assert_eq!(sel.to_string(), canonical, "{input:?}");
            assert_eq!(Selector::parse(canonical).unwrap(), sel, "round trip of {input:?}");
        }
        assert!(Selector::parse("").unwrap().is_everything());
        assert_eq!("a=b".parse::<Selector>().unwrap().to_string(), "a=b");
    }

    #[test]
    fn matches_like_kubernetes() {
        let l = [("app", "web"), ("tier", "front"), ("empty", "")];
        assert!(matches("", &l));
        assert!(matches("app=web", &l));
        assert!(matches("app==web,tier=front", &l));
        assert!(!matches("app=db", &l));
        assert!(!matches("app=web,tier=back", &l));
        assert!(matches("app!=db", &l));
        assert!(matches("missing!=x", &l), "!= matches a missing label");
        assert!(!matches("app!=web", &l));
        assert!(matches("tier in (front,back)", &l));
        assert!(!matches("tier in (back)", &l));
        assert!(!matches("missing in (x)", &l));
        assert!(matches("tier notin (back)", &l));
        assert!(matches("missing notin (x)", &l), "notin matches a missing label");
        assert!(!matches("tier notin (front)", &l));
        assert!(matches("app", &l));
        assert!(!matches("missing", &l));
        assert!(matches("!missing", &l));
        assert!(!matches("!app", &l));
        assert!(matches("empty=", &l));
        assert!(!matches("app=", &l));
    }

    #[test]
    fn matches_json_objects() {
        let obj = serde_json::json!({"metadata": {"name": "p", "labels": {"app": "web"}}});
        assert!(Selector::parse("app in (web)").unwrap().matches(&obj));
        assert!(!Selector::parse("app,tier").unwrap().matches(&obj));
        assert!(!Selector::parse("app").unwrap().matches(&serde_json::json!({"metadata": {}})));
    }

    #[test]
    fn required_pairs_are_the_equalities_and_sets() {
        let sel = Selector::parse("app=web,tier in (a,b),x!=y,!z").unwrap();
        assert_eq!(sel.required_pairs().collect::<Vec<_>>(), [vec!["app=web".to_string()], vec!["tier=a".into(), "tier=b".into()]]);
    }

    #[test]
    fn rejects_bad_selectors_naming_the_bad_part() {
        let cases = [
            ("app=web,", "trailing comma"),
            ("a=b,,c=d", "empty requirement"),
            ("app web", "after key `app` expected"),
            ("app in a,b", "expected `(`"),
            ("app in ()", "at least one value"),
            ("app in (a,,b)", "empty value in the set for `app`"),
            ("app in (a", "missing `)`"),
            ("app>3", "operator `>` is not supported"),
            ("=web", "expected a label key, found `=`"),
            ("!", "found the end"),
            ("Bad_Prefix/x=1", "invalid label key `Bad_Prefix/x`"),
            ("-app=1", "invalid label key `-app`"),
            ("app=web!", "expected `,` or the end, found `!`"),
            ("app=we$b", "invalid value `we$b` for `app`"),
            ("app=a=b", "expected `,` or the end, found `=`"),
            ("app=(x)", "expected a value for `app`"),
        ];
        for (sel, want) in cases {
            let got = reason(sel);
            assert!(got.contains(want), "{sel:?}: {got:?} should contain {want:?}");
        }
        let long = format!("a={}", "x".repeat(64));
        assert!(reason(&long).contains("invalid value"));
    }
}
