//! Packed metadata (contract 0.3.1): the answer of a `cache.*-meta-packed` read, every object's
//! metadata and declared fields in one byte buffer, so a read copies one buffer into the plugin
//! instead of one allocation per string (an `object-meta` record has a dozen or more), and the
//! plugin reads it in place as borrowed [`Meta`] views without parsing JSON.
//!
//! The host encodes ([`encode`]), the SDK decodes ([`decode`]); both use this module, so the
//! format has one definition. Layout, little-endian throughout:
//!
//! ```text
//! buffer  = FORMAT:u8 count:u32 object*count
//! object  = namespace:opt-str name:str uid:str resource-version:str generation:opt-i64
//!           creation-timestamp:opt-str deletion-timestamp:opt-str
//!           labels:pairs annotations:pairs
//!           owners:u32 owner*  finalizers:u32 str*  fields:u32 opt-str*
//! owner   = api-version:str kind:str name:str uid:str flags:u8   (1 controller, 2 block-owner-deletion)
//! pairs   = u32 (str str)*
//! str     = len:u32 utf-8 bytes          opt-str = u32::MAX (none) | str
//! opt-i64 = 0:u8 | 1:u8 i64
//! ```
//!
//! Decoding checks every length against the buffer and every string's UTF-8: a malformed
//! buffer is an error naming the offset, never a panic.

/// The format byte this module writes and reads first.
pub const FORMAT: u8 = 1;

const NONE: u32 = u32::MAX;
const CONTROLLER: u8 = 1;
const BLOCK_OWNER_DELETION: u8 = 2;

/// One object's metadata and declared fields, borrowed from wherever they live (the host's
/// records when encoding, the buffer when decoding).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta<'a> {
    /// `metadata.namespace`; none for cluster-scoped objects.
    pub namespace: Option<&'a str>,
    /// `metadata.name`.
    pub name: &'a str,
    /// `metadata.uid`.
    pub uid: &'a str,
    /// `metadata.resourceVersion`.
    pub resource_version: &'a str,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `metadata.creationTimestamp` (RFC 3339, as the API server wrote it).
    pub creation_timestamp: Option<&'a str>,
    /// `metadata.deletionTimestamp`: set once the object is being deleted.
    pub deletion_timestamp: Option<&'a str>,
    /// `metadata.labels`, in the order the host keeps them (sorted by key).
    pub labels: Vec<(&'a str, &'a str)>,
    /// `metadata.annotations` with string values.
    pub annotations: Vec<(&'a str, &'a str)>,
    /// `metadata.ownerReferences`.
    pub owner_references: Vec<OwnerRef<'a>>,
    /// `metadata.finalizers`.
    pub finalizers: Vec<&'a str>,
    /// The declared fields of the object's kind, in declaration order: each one's JSON text,
    /// none where the object lacks it.
    pub fields: Vec<Option<&'a str>>,
}

/// One owner reference.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnerRef<'a> {
    /// The owner's `apiVersion`.
    pub api_version: &'a str,
    /// The owner's `kind`.
    pub kind: &'a str,
    /// The owner's name.
    pub name: &'a str,
    /// The owner's uid.
    pub uid: &'a str,
    /// `controller: true`.
    pub controller: bool,
    /// `blockOwnerDeletion: true`.
    pub block_owner_deletion: bool,
}

impl<'a> Meta<'a> {
    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&'a str> {
        self.labels.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    /// The uid of the controller owner (`controller: true`), if any.
    pub fn controller_uid(&self) -> Option<&'a str> {
        self.owner_references.iter().find(|r| r.controller).map(|r| r.uid)
    }

    /// Position of the owner reference with this uid.
    pub fn owner_index(&self, uid: &str) -> Option<usize> {
        self.owner_references.iter().position(|r| r.uid == uid)
    }

    /// Declared field number `i`'s JSON text; none if the object lacks it.
    pub fn field(&self, i: usize) -> Option<&'a str> {
        self.fields.get(i).copied().flatten()
    }
}

/// A buffer [`decode`] cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The first byte is not [`FORMAT`].
    #[error("packed metadata: format {found}, this reader knows format {FORMAT}")]
    Format {
        /// The format byte found.
        found: u8,
    },
    /// A length or count runs past the end of the buffer.
    #[error("packed metadata: {what} at byte {at} runs past the end of the {len}-byte buffer")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Its offset.
        at: usize,
        /// The buffer's length.
        len: usize,
    },
    /// A string is not UTF-8.
    #[error("packed metadata: the string at byte {at} is not UTF-8")]
    NotUtf8 {
        /// Its offset.
        at: usize,
    },
    /// Bytes left after the last object.
    #[error("packed metadata: {extra} bytes after the last object")]
    Trailing {
        /// How many.
        extra: usize,
    },
}

/// Encode `metas` (in order) into one buffer, allocated once at its final size.
pub fn encode(metas: &[Meta<'_>]) -> Vec<u8> {
    let mut out = Writer(Vec::with_capacity(5 + metas.iter().map(encoded_len).sum::<usize>()));
    out.0.push(FORMAT);
    out.len(metas.len());
    for m in metas {
        out.object(m);
    }
    out.0
}

/// Bytes [`Writer::object`] writes for `m`.
fn encoded_len(m: &Meta<'_>) -> usize {
    let s = |s: &str| 4 + s.len();
    let o = |s: Option<&str>| 4 + s.map_or(0, str::len);
    let pairs = |p: &[(&str, &str)]| 4 + p.iter().map(|(k, v)| s(k) + s(v)).sum::<usize>();
    o(m.namespace)
        + s(m.name)
        + s(m.uid)
        + s(m.resource_version)
        + 1
        + m.generation.map_or(0, |_| 8)
        + o(m.creation_timestamp)
        + o(m.deletion_timestamp)
        + pairs(&m.labels)
        + pairs(&m.annotations)
        + 4
        + m.owner_references.iter().map(|r| s(r.api_version) + s(r.kind) + s(r.name) + s(r.uid) + 1).sum::<usize>()
        + 4
        + m.finalizers.iter().map(|f| s(f)).sum::<usize>()
        + 4
        + m.fields.iter().map(|f| o(*f)).sum::<usize>()
}

/// Decode a buffer written by [`encode`]: the objects, borrowing their strings from `buf`.
pub fn decode(buf: &[u8]) -> Result<Vec<Meta<'_>>, DecodeError> {
    let mut r = Reader { buf, at: 0 };
    let format = r.u8("the format byte")?;
    if format != FORMAT {
        return Err(DecodeError::Format { found: format });
    }
    let count = r.count("the object count", 40)?;
    let mut metas = Vec::with_capacity(count);
    for _ in 0..count {
        metas.push(r.object()?);
    }
    match buf.len() - r.at {
        0 => Ok(metas),
        extra => Err(DecodeError::Trailing { extra }),
    }
}

struct Writer(Vec<u8>);

impl Writer {
    fn u32(&mut self, n: u32) {
        self.0.extend_from_slice(&n.to_le_bytes());
    }

    fn len(&mut self, n: usize) {
        // Nothing in an object held in memory comes near 4 GiB; saturating keeps the writer total.
        self.u32(u32::try_from(n).unwrap_or(NONE - 1));
    }

    fn str(&mut self, s: &str) {
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }

    fn opt_str(&mut self, s: Option<&str>) {
        match s {
            Some(s) => self.str(s),
            None => self.u32(NONE),
        }
    }

    fn pairs(&mut self, pairs: &[(&str, &str)]) {
        self.len(pairs.len());
        for (k, v) in pairs {
            self.str(k);
            self.str(v);
        }
    }

    fn object(&mut self, m: &Meta<'_>) {
        self.opt_str(m.namespace);
        self.str(m.name);
        self.str(m.uid);
        self.str(m.resource_version);
        match m.generation {
            Some(g) => {
                self.0.push(1);
                self.0.extend_from_slice(&g.to_le_bytes());
            }
            None => self.0.push(0),
        }
        self.opt_str(m.creation_timestamp);
        self.opt_str(m.deletion_timestamp);
        self.pairs(&m.labels);
        self.pairs(&m.annotations);
        self.len(m.owner_references.len());
        for o in &m.owner_references {
            for s in [o.api_version, o.kind, o.name, o.uid] {
                self.str(s);
            }
            self.0.push(if o.controller { CONTROLLER } else { 0 } | if o.block_owner_deletion { BLOCK_OWNER_DELETION } else { 0 });
        }
        self.len(m.finalizers.len());
        for f in &m.finalizers {
            self.str(f);
        }
        self.len(m.fields.len());
        for f in &m.fields {
            self.opt_str(*f);
        }
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or(DecodeError::Truncated { what, at: self.at, len: self.buf.len() })?;
        let b = &self.buf[self.at..end];
        self.at = end;
        Ok(b)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.bytes(1, what)?[0])
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let b = self.bytes(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A count of items that take at least `min_bytes` each: checked against what is left, so
    /// a hostile count cannot make the reader reserve more than the buffer could hold.
    fn count(&mut self, what: &'static str, min_bytes: usize) -> Result<usize, DecodeError> {
        let at = self.at;
        let n = self.u32(what)? as usize;
        if n.saturating_mul(min_bytes) > self.buf.len() - self.at {
            return Err(DecodeError::Truncated { what, at, len: self.buf.len() });
        }
        Ok(n)
    }

    fn text(&mut self, n: usize, what: &'static str) -> Result<&'a str, DecodeError> {
        let at = self.at;
        std::str::from_utf8(self.bytes(n, what)?).map_err(|_| DecodeError::NotUtf8 { at })
    }

    fn str(&mut self, what: &'static str) -> Result<&'a str, DecodeError> {
        let n = self.u32(what)? as usize;
        self.text(n, what)
    }

    fn opt_str(&mut self, what: &'static str) -> Result<Option<&'a str>, DecodeError> {
        match self.u32(what)? {
            NONE => Ok(None),
            n => self.text(n as usize, what).map(Some),
        }
    }

    fn pairs(&mut self, what: &'static str) -> Result<Vec<(&'a str, &'a str)>, DecodeError> {
        let n = self.count(what, 8)?;
        (0..n).map(|_| Ok((self.str(what)?, self.str(what)?))).collect()
    }

    fn object(&mut self) -> Result<Meta<'a>, DecodeError> {
        let namespace = self.opt_str("a namespace")?;
        let name = self.str("a name")?;
        let uid = self.str("a uid")?;
        let resource_version = self.str("a resourceVersion")?;
        let generation = match self.u8("a generation")? {
            0 => None,
            _ => {
                let b = self.bytes(8, "a generation")?;
                Some(i64::from_le_bytes(b.try_into().unwrap_or_default()))
            }
        };
        let creation_timestamp = self.opt_str("a creationTimestamp")?;
        let deletion_timestamp = self.opt_str("a deletionTimestamp")?;
        let labels = self.pairs("labels")?;
        let annotations = self.pairs("annotations")?;
        let owners = self.count("ownerReferences", 17)?;
        let mut owner_references = Vec::with_capacity(owners);
        for _ in 0..owners {
            let (api_version, kind, name, uid) =
                (self.str("an owner")?, self.str("an owner")?, self.str("an owner")?, self.str("an owner")?);
            let flags = self.u8("an owner's flags")?;
            owner_references.push(OwnerRef {
                api_version,
                kind,
                name,
                uid,
                controller: flags & CONTROLLER != 0,
                block_owner_deletion: flags & BLOCK_OWNER_DELETION != 0,
            });
        }
        let n = self.count("finalizers", 4)?;
        let finalizers = (0..n).map(|_| self.str("a finalizer")).collect::<Result<_, _>>()?;
        let n = self.count("fields", 4)?;
        let fields = (0..n).map(|_| self.opt_str("a field")).collect::<Result<_, _>>()?;
        Ok(Meta {
            namespace,
            name,
            uid,
            resource_version,
            generation,
            creation_timestamp,
            deletion_timestamp,
            labels,
            annotations,
            owner_references,
            finalizers,
            fields,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Meta<'static> {
        Meta {
            namespace: Some("shop"),
            name: "web-1",
            uid: "u1",
            resource_version: "7",
            generation: Some(-3),
            creation_timestamp: Some("2026-01-01T00:00:00Z"),
            deletion_timestamp: None,
            labels: vec![("app", "web"), ("tier", "")],
            annotations: vec![("a.io/x", "1\n\"q\"")],
            owner_references: vec![
                OwnerRef {
                    api_version: "apps/v1",
                    kind: "ReplicaSet",
                    name: "web",
                    uid: "rs",
                    controller: true,
                    block_owner_deletion: true,
                },
                OwnerRef { api_version: "v1", kind: "ConfigMap", name: "c", uid: "cm", controller: false, block_owner_deletion: false },
            ],
            finalizers: vec!["f/x"],
            fields: vec![Some("\"Running\""), None, Some("[]")],
        }
    }

    #[test]
    fn what_is_encoded_is_decoded() {
        let metas = [pod(), Meta { name: "n", ..Meta::default() }, Meta { namespace: Some("ü"), generation: Some(i64::MAX), ..pod() }];
        let buf = encode(&metas);
        assert_eq!(buf.len(), 5 + metas.iter().map(encoded_len).sum::<usize>(), "the size is computed exactly");
        assert_eq!(decode(&buf).unwrap(), metas);
        assert_eq!(decode(&encode(&[])).unwrap(), Vec::<Meta<'_>>::new());
        let m = &decode(&buf).unwrap()[0];
        assert_eq!((m.label("tier"), m.label("nope"), m.controller_uid(), m.owner_index("cm")), (Some(""), None, Some("rs"), Some(1)));
        assert_eq!((m.field(0), m.field(1), m.field(9)), (Some("\"Running\""), None, None));
    }

    /// Every truncation and every single-byte corruption of a valid buffer gives a result or an
    /// error, never a panic; a truncation is always an error.
    #[test]
    fn malformed_buffers_are_errors() {
        let buf = encode(&[pod(), pod()]);
        for end in 0..buf.len() {
            assert!(decode(&buf[..end]).is_err(), "truncated at {end}");
        }
        for at in 0..buf.len() {
            for byte in [0x00, 0x7f, 0xc3, 0xff] {
                let mut bad = buf.clone();
                bad[at] = byte;
                let _ = decode(&bad);
            }
        }
        assert_eq!(decode(&[2, 0, 0, 0, 0]), Err(DecodeError::Format { found: 2 }));
        assert_eq!(decode(&[FORMAT, 0, 0, 0, 0, 9]), Err(DecodeError::Trailing { extra: 1 }));
        assert!(matches!(decode(&[FORMAT, 0xff, 0xff, 0xff, 0xff]), Err(DecodeError::Truncated { what: "the object count", at: 1, .. })));
        let mut not_utf8 = encode(&[Meta { name: "ab", ..Meta::default() }]);
        let at = not_utf8.iter().position(|&b| b == b'a').unwrap();
        not_utf8[at] = 0xff;
        assert_eq!(decode(&not_utf8), Err(DecodeError::NotUtf8 { at }));
    }
}
