//! `go-spew`'s `%#v` printing of a Go value, from its JSON and its Go type ([`super::schema`]).
//!
//! kube-controller-manager hashes a pod template by printing it with
//! `spew.ConfigState{Indent: " ", SortKeys: true, DisableMethods: true, SpewKeys: true}` and
//! `%#v` (`pkg/util/hash.DeepHashObject`). That printing shows *every* field of every struct,
//! set or not, each prefixed with its Go type: `{ObjectMeta:(v1.ObjectMeta){Name:(string) ...`.
//! Its rules, as `go-spew`'s `format.go` (v1.1.1) applies them:
//!
//! - a value prints `(<type>)` first, except where spew sets `ignoreNextType`: slice and array
//!   elements, map keys and values, and the value behind a pointer;
//! - a pointer prints `(*T)` then its target, or `(*T)<nil>`; with the type ignored, `<*>` then
//!   the target, or `<nil>`;
//! - a struct prints `{Name:value Name:value}`, fields in declaration order (embedded ones under
//!   their type's name);
//! - a nil slice or map prints `<nil>`; a slice `[a b]`; a map `map[k:v k:v]`, keys sorted;
//! - strings print raw (no quotes), numbers in decimal, booleans as `true`/`false`.
//!
//! Values come from the JSON of an object read from the API server. KCM decodes the same object
//! from protobuf, where an empty list or map is nil: so are they here (absent, `null`, `[]` and
//! `{}` for a slice or map all print `<nil>`), while a pointer to an empty struct (`{}`) is
//! kept, as protobuf keeps it.

use serde_json::{Map, Value};

use super::quantity;

/// A Go type, as [`super::schema::TYPES`] lists them.
pub struct Type {
    /// What `reflect.Type.String()` prints: `v1.Container`, `*int64`, `map[string]string`.
    pub name: &'static str,
    /// Its kind and what it is made of.
    pub kind: Kind,
}

/// A Go type's kind; type references are indexes into [`super::schema::TYPES`].
pub enum Kind {
    /// `bool`.
    Bool,
    /// Any signed integer type.
    Int,
    /// Any unsigned integer type.
    Uint,
    /// `string`.
    Str,
    /// `*T`.
    Ptr(u16),
    /// `[]T`.
    Slice(u16),
    /// `map[K]V`.
    Map(u16, u16),
    /// A named non-struct type (`type Protocol string`): printed as its underlying type.
    Named(u16),
    /// A struct.
    Struct(&'static [Field]),
    /// A struct whose JSON is not its fields (see [`Special`]).
    Special(Special),
}

/// Types whose JSON form is not a JSON object of their fields.
pub enum Special {
    /// `resource.Quantity`: a string; its fields are what `ParseQuantity` makes of it.
    Quantity(&'static [Field]),
    /// `intstr.IntOrString`: a number or a string.
    IntOrString(&'static [Field]),
    /// `metav1.Time`: an RFC 3339 string or null (a zero `time.Time`).
    MetaTime(&'static [Field]),
    /// `time.Time` inside a `metav1.Time`.
    GoTime,
    /// `inf.Dec` behind a quantity's `d`: `{"neg", "abs" (64-bit words, least significant
    /// first), "scale"}` as [`super::quantity`] builds it.
    InfDec,
}

/// A struct field.
pub struct Field {
    /// The Go field name (an embedded field's is its type's name).
    pub go: &'static str,
    /// Its JSON name: `Some("")` for `json:",inline"` (its fields are the parent's), `None`
    /// without a JSON tag (then a special type's decoded form names it by its Go name).
    pub json: Option<&'static str>,
    /// Its type.
    pub ty: u16,
}

/// A printing, and whether it is exactly KCM's.
pub struct Printed {
    /// The text spew would write.
    pub text: String,
    /// False when the value held something whose Go form cannot be rebuilt from JSON
    /// (a non-zero timestamp, whose `time.Time` points at the process's time zone; a quantity
    /// held as `inf.Dec`; raw managed fields): the text is then the closest approximation.
    pub exact: bool,
}

/// Print `value` (the JSON of a Go value of type `ty`) as spew's `%#v` does.
pub fn print(types: &'static [Type], ty: u16, value: &Value) -> Printed {
    let mut p = Printer { types, out: String::with_capacity(8 * 1024), exact: true };
    p.format(ty, Some(value), false);
    Printed { text: p.out, exact: p.exact }
}

struct Printer {
    types: &'static [Type],
    out: String,
    exact: bool,
}

/// A JSON value, absent and `null` alike.
fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

impl Printer {
    /// The type with this id (the schema's tests check every id it holds is in the table).
    fn ty(&self, id: u16) -> &'static Type {
        &self.types[usize::from(id)]
    }

    fn type_prefix(&mut self, name: &str) {
        self.out.push('(');
        self.out.push_str(name);
        self.out.push(')');
    }

    fn format(&mut self, id: u16, v: Option<&Value>, ignore_type: bool) {
        let t = self.ty(id);
        if let Kind::Ptr(target) = t.kind {
            return self.pointer(t, target, v, ignore_type);
        }
        if !ignore_type {
            self.type_prefix(t.name);
        }
        self.value(t, v);
    }

    /// spew's `formatPtr` for a single pointer.
    fn pointer(&mut self, t: &Type, target: u16, v: Option<&Value>, ignore_type: bool) {
        match (present(v), ignore_type) {
            (None, true) => self.out.push_str("<nil>"),
            (None, false) => {
                self.type_prefix(t.name);
                self.out.push_str("<nil>");
            }
            (Some(v), ignore) => {
                if ignore {
                    self.out.push_str("<*>");
                } else {
                    self.type_prefix(t.name);
                }
                self.format(target, Some(v), true);
            }
        }
    }

    /// The value itself, after its type prefix.
    fn value(&mut self, t: &Type, v: Option<&Value>) {
        let v = present(v);
        match &t.kind {
            Kind::Bool => self.out.push_str(if v.and_then(Value::as_bool).unwrap_or(false) { "true" } else { "false" }),
            Kind::Int | Kind::Uint => match v {
                Some(Value::Number(n)) => self.out.push_str(&n.to_string()),
                Some(_) => {
                    self.exact = false;
                    self.out.push('0');
                }
                None => self.out.push('0'),
            },
            Kind::Str => match v {
                Some(Value::String(s)) => self.out.push_str(s),
                Some(other) => {
                    self.exact = false;
                    self.out.push_str(&other.to_string());
                }
                None => {}
            },
            Kind::Named(under) => {
                let under = self.ty(*under);
                self.value(under, v);
            }
            Kind::Slice(elem) => self.slice(*elem, v),
            Kind::Map(key, val) => self.map(*key, *val, v),
            Kind::Struct(fields) => self.structure(fields, v.and_then(Value::as_object)),
            Kind::Special(special) => self.special(special, v),
            Kind::Ptr(_) => {
                // A pointer is formatted by `pointer`; a named pointer type is not in the schema.
                self.exact = false;
            }
        }
    }

    fn slice(&mut self, elem: u16, v: Option<&Value>) {
        let items = match v {
            Some(Value::Array(items)) if !items.is_empty() => items,
            None | Some(Value::Array(_)) => return self.out.push_str("<nil>"),
            Some(_) => {
                // Not a list: nothing KCM would have decoded.
                self.exact = false;
                return self.out.push_str("<nil>");
            }
        };
        self.out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                self.out.push(' ');
            }
            self.format(elem, Some(item), true);
        }
        self.out.push(']');
    }

    fn map(&mut self, key: u16, val: u16, v: Option<&Value>) {
        let Some(entries) = v.and_then(Value::as_object).filter(|m| !m.is_empty()) else {
            if v.is_some_and(|v| !v.is_object()) {
                self.exact = false;
            }
            return self.out.push_str("<nil>");
        };
        // serde_json's map keeps its keys sorted (no `preserve_order`): spew's SortKeys order.
        let mut keys: Vec<&String> = entries.keys().collect();
        keys.sort_unstable();
        self.out.push_str("map[");
        for (i, k) in keys.into_iter().enumerate() {
            if i > 0 {
                self.out.push(' ');
            }
            self.format(key, Some(&Value::String(k.clone())), true);
            self.out.push(':');
            self.format(val, entries.get(k), true);
        }
        self.out.push(']');
    }

    fn structure(&mut self, fields: &[Field], obj: Option<&Map<String, Value>>) {
        self.out.push('{');
        for (i, f) in fields.iter().enumerate() {
            if i > 0 {
                self.out.push(' ');
            }
            self.out.push_str(f.go);
            self.out.push(':');
            match f.json {
                // Inline (`json:",inline"`): the embedded struct's fields are in the parent's
                // JSON object.
                Some("") => {
                    let t = self.ty(f.ty);
                    self.type_prefix(t.name);
                    match &t.kind {
                        Kind::Struct(inner) => self.structure(inner, obj),
                        _ => self.exact = false,
                    }
                }
                // Not in JSON (`json:"-"`: FieldsV1's raw bytes, whose JSON is the object itself).
                Some("-") => {
                    if obj.is_some_and(|o| !o.is_empty()) {
                        self.exact = false;
                    }
                    self.format(f.ty, None, false);
                }
                Some(name) => self.format(f.ty, obj.and_then(|o| o.get(name)), false),
                None => self.format(f.ty, obj.and_then(|o| o.get(f.go)), false),
            }
        }
        self.out.push('}');
    }

    fn special(&mut self, special: &Special, v: Option<&Value>) {
        match special {
            Special::Quantity(fields) => {
                let decoded = match v {
                    Some(Value::String(s)) => quantity::go_fields(s),
                    Some(Value::Number(n)) => quantity::go_fields(&n.to_string()),
                    None => Some(quantity::GoQuantity::zero()),
                    Some(_) => None,
                };
                let decoded = decoded.unwrap_or_else(|| {
                    self.exact = false;
                    quantity::GoQuantity::zero()
                });
                if !decoded.exact {
                    self.exact = false;
                }
                self.structure(fields, Some(&decoded.to_json()));
            }
            Special::IntOrString(fields) => {
                let (ty, int, string) = match v {
                    Some(Value::Number(n)) => (0, n.as_i64().unwrap_or(0), String::new()),
                    Some(Value::String(s)) => (1, 0, s.clone()),
                    None => (0, 0, String::new()),
                    Some(_) => {
                        self.exact = false;
                        (0, 0, String::new())
                    }
                };
                let mut m = Map::new();
                m.insert("Type".into(), ty.into());
                m.insert("IntVal".into(), int.into());
                m.insert("StrVal".into(), string.into());
                self.structure(fields, Some(&m));
            }
            Special::MetaTime(fields) => {
                if v.is_some() {
                    // A set time is a `time.Time` in the local zone: its printing follows the
                    // `*time.Location` of KCM's process. Printed as zero.
                    self.exact = false;
                }
                self.structure(fields, Some(&Map::new()));
            }
            Special::GoTime => self.out.push_str("{wall:(uint64)0 ext:(int64)0 loc:(*time.Location)<nil>}"),
            Special::InfDec => {
                let v = v.unwrap_or(&Value::Null);
                let words: Vec<String> = v["abs"].as_array().into_iter().flatten().map(ToString::to_string).collect();
                let abs = if words.is_empty() { "<nil>".to_owned() } else { format!("[{}]", words.join(" ")) };
                let neg = v["neg"].as_bool().unwrap_or(false);
                let scale = v["scale"].as_i64().unwrap_or(0);
                self.out.push_str(&format!("{{unscaled:(big.Int){{neg:(bool){neg} abs:(big.nat){abs}}} scale:(inf.Scale){scale}}}"));
            }
        }
    }
}
