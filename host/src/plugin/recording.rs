//! [`Recording`]: everything one reconcile saw, kept to run it again offline (`wasmloop replay`).
//!
//! A plugin is a function of its inputs: the request, the answers of its cache reads, and the
//! clock and random values it drew through WASI. A recording holds those inputs and the outcome
//! they produced. On disk it is JSON, zstd-compressed (`.json.zst`), with a [`FORMAT`] version;
//! [`Recording::decode`] also takes plain JSON (e.g. a recording edited by hand). A recording is
//! input from anywhere: it is decoded within a byte cap ([`DEFAULT_MAX_DECODED`]), so a
//! decompression bomb is refused instead of filling memory.
//!
//! What fills one in is [`super::recorder`]; what serves one to a plugin is [`super::replay`].

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::bindings::{cache as wit_cache, types as wit};
use crate::kinds::{KindRef, ObjectKey};
use crate::reconciler::{Outcome, Reason, ReconcileError, Request};

/// The version of the recording format this host writes and reads.
pub const FORMAT: u32 = 1;

/// How large a recording's JSON may be by default (decompressed): the recorder keeps at most 16
/// times its compressed cap of answers (16 MiB by default), and their JSON escaping adds less
/// than as much again.
pub const DEFAULT_MAX_DECODED: u64 = 64 << 20;

/// The zstd level recordings are compressed with (small inputs: fast at any level).
const ZSTD_LEVEL: i32 = 15;

/// Why a recording could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The JSON is malformed, or not a recording.
    #[error("not a recording: {0}")]
    Json(#[from] serde_json::Error),
    /// zstd failed (a truncated or corrupt `.json.zst`).
    #[error("zstd: {0}")]
    Zstd(#[source] std::io::Error),
    /// The recording decompresses to more than the byte cap allows (a decompression bomb, or a
    /// recording larger than this reader was told to accept).
    #[error("the recording {0}")]
    Decompressed(#[source] crate::bounded::Error),
    /// The recording, plain JSON, is over the byte cap.
    #[error("the recording is {size} bytes of JSON, over the {max}-byte cap")]
    JsonTooLarge {
        /// Its size.
        size: u64,
        /// The cap.
        max: u64,
    },
    /// The recording was written in a format this host does not read.
    #[error("recording format {found}, but this host reads format {FORMAT}")]
    Format {
        /// The recording's format.
        found: u32,
    },
    /// The encoded recording is over the byte cap.
    #[error("the recording is {size} bytes compressed, over its {max}-byte cap")]
    TooLarge {
        /// Its compressed size.
        size: usize,
        /// The cap.
        max: usize,
    },
    /// The request's key or reason does not parse.
    #[error("invalid request in the recording: {0}")]
    Request(String),
}

/// Everything one reconcile saw, and what it returned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Recording {
    /// The format version ([`FORMAT`]).
    pub format: u32,
    /// The plugin's name.
    pub plugin: String,
    /// The plugin's own version (`metadata().version`).
    pub version: String,
    /// `sha256:<hex>` of the plugin bytes that ran.
    pub digest: String,
    /// When it was recorded, milliseconds since the Unix epoch (host time, not given to the guest).
    pub recorded_at_ms: u64,
    /// The request.
    pub request: RecordedRequest,
    /// Every cache read, in order, with its answer.
    pub reads: Vec<Read>,
    /// The WASI wall clock's answers, in order: nanoseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wall_clock: Vec<u64>,
    /// The WASI monotonic clock's answers, in order: nanoseconds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub monotonic_clock: Vec<u64>,
    /// The clocks' resolutions as the guest was told them (wall, monotonic), in nanoseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_resolution: Option<(u64, u64)>,
    /// The bytes drawn from `wasi:random/random`, in order, hex.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub random: String,
    /// The bytes drawn from `wasi:random/insecure`, in order, hex.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub insecure_random: String,
    /// The `wasi:random/insecure-seed` value, hex (absent: the guest made no WASI call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_seed: Option<String>,
    /// Reads past the recorder's byte cap were not kept: a replay reports them as not recorded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// What the reconcile returned.
    pub outcome: RecordedOutcome,
}

impl Recording {
    /// The recording as `.json.zst` bytes, refused over `max_bytes` (compressed).
    pub fn encode(&self, max_bytes: usize) -> Result<Vec<u8>, Error> {
        let json = serde_json::to_vec(self)?;
        let bytes = zstd::bulk::compress(&json, ZSTD_LEVEL).map_err(Error::Zstd)?;
        if bytes.len() > max_bytes {
            return Err(Error::TooLarge { size: bytes.len(), max: max_bytes });
        }
        Ok(bytes)
    }

    /// A recording from `.json.zst` bytes, or plain JSON, of at most [`DEFAULT_MAX_DECODED`]
    /// bytes of JSON; checks the format version.
    pub fn decode(bytes: &[u8]) -> Result<Self, Error> {
        Self::decode_within(bytes, DEFAULT_MAX_DECODED)
    }

    /// A recording from `.json.zst` bytes, or plain JSON, refused when its JSON is (or would
    /// decompress to) more than `max_json` bytes; checks the format version.
    pub fn decode_within(bytes: &[u8], max_json: u64) -> Result<Self, Error> {
        let json = if bytes.starts_with(&crate::bounded::ZSTD_MAGIC) {
            std::borrow::Cow::Owned(crate::bounded::zstd(bytes, max_json).map_err(|e| match e {
                crate::bounded::Error::Zstd(e) => Error::Zstd(e),
                other => Error::Decompressed(other),
            })?)
        } else if bytes.len() as u64 > max_json {
            return Err(Error::JsonTooLarge { size: bytes.len() as u64, max: max_json });
        } else {
            std::borrow::Cow::Borrowed(bytes)
        };
        // The version first, so that a future format says so rather than failing to parse.
        #[derive(Deserialize)]
        struct Probe {
            format: u32,
        }
        let probe: Probe = serde_json::from_slice(&json)?;
        if probe.format != FORMAT {
            return Err(Error::Format { found: probe.format });
        }
        Ok(serde_json::from_slice(&json)?)
    }
}

/// The request of a recorded reconcile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedRequest {
    /// The key, as logs print it (`apps/v1/ReplicaSet/shop/web`).
    pub key: String,
    /// Why it was queued: `event`, `resync`, `requeue` or `retry:<n>`.
    pub reason: String,
    /// The previous failure, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

impl RecordedRequest {
    /// The recorded form of `request`.
    pub fn of(request: &Request) -> Self {
        let reason = match request.reason {
            Reason::Event => "event".to_string(),
            Reason::Resync => "resync".to_string(),
            Reason::Requeue => "requeue".to_string(),
            Reason::Retry(n) => format!("retry:{n}"),
        };
        Self { key: request.key.to_string(), reason, last_error: request.last_error.clone() }
    }

    /// The request again.
    pub fn request(&self) -> Result<Request, Error> {
        let key: ObjectKey = self.key.parse().map_err(|e| Error::Request(format!("key {:?}: {e}", self.key)))?;
        let reason = match self.reason.as_str() {
            "event" => Reason::Event,
            "resync" => Reason::Resync,
            "requeue" => Reason::Requeue,
            other => match other.strip_prefix("retry:").and_then(|n| n.parse().ok()) {
                Some(n) => Reason::Retry(n),
                None => return Err(Error::Request(format!("reason {other:?}"))),
            },
        };
        Ok(Request { key, reason, last_error: self.last_error.clone() })
    }
}

/// A kind, as reads name it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Kind {
    /// `apps/v1`, `v1`.
    pub api_version: String,
    /// `ReplicaSet`.
    pub kind: String,
}

impl From<&wit::KindRef> for Kind {
    fn from(k: &wit::KindRef) -> Self {
        Self { api_version: k.api_version.clone(), kind: k.kind.clone() }
    }
}

impl From<&KindRef> for Kind {
    fn from(k: &KindRef) -> Self {
        Self { api_version: k.api_version.to_string(), kind: k.kind.to_string() }
    }
}

/// A cache read: which call, with which arguments. Replay looks answers up by it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Call {
    /// `cache.get`.
    Get {
        /// The kind read.
        kind: Kind,
        /// Its namespace.
        namespace: Option<String>,
        /// Its name.
        name: String,
    },
    /// `cache.list`.
    List {
        /// The kind read.
        kind: Kind,
        /// One namespace, or all.
        namespace: Option<String>,
        /// A label selector.
        selector: Option<String>,
    },
    /// `cache.by-index`.
    ByIndex {
        /// The kind read.
        kind: Kind,
        /// The index.
        index: String,
        /// The value looked up.
        value: String,
    },
    /// `cache.get-meta`.
    GetMeta {
        /// The kind read.
        kind: Kind,
        /// Its namespace.
        namespace: Option<String>,
        /// Its name.
        name: String,
    },
    /// `cache.list-meta`.
    ListMeta {
        /// The kind read.
        kind: Kind,
        /// One namespace, or all.
        namespace: Option<String>,
        /// A label selector.
        selector: Option<String>,
    },
    /// `cache.by-index-meta`.
    ByIndexMeta {
        /// The kind read.
        kind: Kind,
        /// The index.
        index: String,
        /// The value looked up.
        value: String,
    },
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let opt = |o: &Option<String>| o.as_deref().map_or("none".to_string(), |s| format!("{s:?}"));
        let kind = |k: &Kind| format!("{}/{}", k.api_version, k.kind);
        match self {
            Call::Get { kind: k, namespace, name } => write!(f, "get({}, {}, {name:?})", kind(k), opt(namespace)),
            Call::GetMeta { kind: k, namespace, name } => write!(f, "get-meta({}, {}, {name:?})", kind(k), opt(namespace)),
            Call::List { kind: k, namespace, selector } => write!(f, "list({}, {}, {})", kind(k), opt(namespace), opt(selector)),
            Call::ListMeta { kind: k, namespace, selector } => {
                write!(f, "list-meta({}, {}, {})", kind(k), opt(namespace), opt(selector))
            }
            Call::ByIndex { kind: k, index, value } => write!(f, "by-index({}, {index:?}, {value:?})", kind(k)),
            Call::ByIndexMeta { kind: k, index, value } => write!(f, "by-index-meta({}, {index:?}, {value:?})", kind(k)),
        }
    }
}

/// One cache read and its answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Read {
    /// The call and its arguments.
    #[serde(flatten)]
    pub call: Call,
    /// What the host answered.
    pub answer: Answer,
    /// This read went over the call's read budget (the reconcile failed because of it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub over_budget: bool,
}

/// What the host answered a cache read. Objects are kept as the JSON text the guest received.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Answer {
    /// `get`: the object, or none.
    Object(Option<String>),
    /// `list`, `by-index`: the objects.
    Objects(Vec<String>),
    /// `get-meta`: the metadata, or none.
    Meta(Option<Box<Meta>>),
    /// `list-meta`, `by-index-meta`: the metadata.
    Metas(Vec<Meta>),
    /// A `cache-error`.
    Error(CacheError),
}

impl Answer {
    /// Bytes of object text (JSON or metadata strings) in the answer, roughly what it costs to keep.
    pub fn size(&self) -> usize {
        match self {
            Answer::Object(o) => o.as_ref().map_or(0, String::len),
            Answer::Objects(os) => os.iter().map(String::len).sum(),
            Answer::Meta(m) => m.as_deref().map_or(0, Meta::size),
            Answer::Metas(ms) => ms.iter().map(Meta::size).sum(),
            Answer::Error(e) => e.message.len(),
        }
    }
}

/// A `cache-error`, recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheError {
    /// `notGranted`, `unknownIndex` or `invalid`.
    pub kind: CacheErrorKind,
    /// Its message.
    pub message: String,
}

/// The case of a `cache-error`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CacheErrorKind {
    /// `not-granted`.
    NotGranted,
    /// `unknown-index`.
    UnknownIndex,
    /// `invalid`.
    Invalid,
}

impl From<&wit_cache::CacheError> for CacheError {
    fn from(e: &wit_cache::CacheError) -> Self {
        use wit_cache::CacheError as W;
        let (kind, message) = match e {
            W::NotGranted(m) => (CacheErrorKind::NotGranted, m),
            W::UnknownIndex(m) => (CacheErrorKind::UnknownIndex, m),
            W::Invalid(m) => (CacheErrorKind::Invalid, m),
        };
        Self { kind, message: message.clone() }
    }
}

impl From<&CacheError> for wit_cache::CacheError {
    fn from(e: &CacheError) -> Self {
        use wit_cache::CacheError as W;
        match e.kind {
            CacheErrorKind::NotGranted => W::NotGranted(e.message.clone()),
            CacheErrorKind::UnknownIndex => W::UnknownIndex(e.message.clone()),
            CacheErrorKind::Invalid => W::Invalid(e.message.clone()),
        }
    }
}

/// An `object-meta` answer, recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs, reason = "the fields of `object-meta` in wit/controller.wit")]
pub struct Meta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub annotations: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<Option<String>>,
}

impl Meta {
    fn size(&self) -> usize {
        let pairs = |v: &[(String, String)]| v.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
        self.name.len()
            + self.uid.len()
            + pairs(&self.labels)
            + pairs(&self.annotations)
            + self.fields.iter().flatten().map(String::len).sum::<usize>()
            + self.owner_references.len() * 64
    }
}

/// An `owner-reference` of a recorded [`Meta`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs, reason = "the fields of `owner-reference` in wit/controller.wit")]
pub struct OwnerReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub controller: bool,
    pub block_owner_deletion: bool,
}

impl From<&wit::ObjectMeta> for Meta {
    fn from(m: &wit::ObjectMeta) -> Self {
        Self {
            namespace: m.namespace.clone(),
            name: m.name.clone(),
            uid: m.uid.clone(),
            resource_version: m.resource_version.clone(),
            generation: m.generation,
            creation_timestamp: m.creation_timestamp.clone(),
            deletion_timestamp: m.deletion_timestamp.clone(),
            labels: m.labels.clone(),
            annotations: m.annotations.clone(),
            owner_references: m
                .owner_references
                .iter()
                .map(|o| OwnerReference {
                    api_version: o.api_version.clone(),
                    kind: o.kind.clone(),
                    name: o.name.clone(),
                    uid: o.uid.clone(),
                    controller: o.controller,
                    block_owner_deletion: o.block_owner_deletion,
                })
                .collect(),
            finalizers: m.finalizers.clone(),
            fields: m.fields.clone(),
        }
    }
}

impl From<&Meta> for wit::ObjectMeta {
    fn from(m: &Meta) -> Self {
        Self {
            namespace: m.namespace.clone(),
            name: m.name.clone(),
            uid: m.uid.clone(),
            resource_version: m.resource_version.clone(),
            generation: m.generation,
            creation_timestamp: m.creation_timestamp.clone(),
            deletion_timestamp: m.deletion_timestamp.clone(),
            labels: m.labels.clone(),
            annotations: m.annotations.clone(),
            owner_references: m
                .owner_references
                .iter()
                .map(|o| wit::OwnerReference {
                    api_version: o.api_version.clone(),
                    kind: o.kind.clone(),
                    name: o.name.clone(),
                    uid: o.uid.clone(),
                    controller: o.controller,
                    block_owner_deletion: o.block_owner_deletion,
                })
                .collect(),
            finalizers: m.finalizers.clone(),
            fields: m.fields.clone(),
        }
    }
}

/// What a reconcile returned: its actions (as the host shows them), the requeue, the error.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedOutcome {
    /// The actions (an outcome's, or a failure's actions executed anyway).
    pub actions: Vec<Value>,
    /// The requeue asked for, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_after_ms: Option<u64>,
    /// The failure, if it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RecordedError>,
}

/// A failed reconcile's error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedError {
    /// Its message.
    pub message: String,
    /// Retried with backoff (transient), or not until something changes (permanent).
    pub transient: bool,
}

impl RecordedOutcome {
    /// The recorded form of a reconcile's result.
    pub fn of(result: &Result<Outcome, ReconcileError>) -> Self {
        let actions = |a: &[crate::actions::Planned]| a.iter().map(|p| serde_json::to_value(p).unwrap_or(Value::Null)).collect();
        match result {
            Ok(o) => Self {
                actions: actions(&o.actions),
                requeue_after_ms: o.requeue_after.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                error: None,
            },
            Err(e) => Self {
                actions: actions(&e.actions),
                requeue_after_ms: None,
                error: Some(RecordedError { message: e.to_string(), transient: e.is_transient() }),
            },
        }
    }

    /// The requeue as a duration.
    pub fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after_ms.map(Duration::from_millis)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample() -> Recording {
        let kind = Kind { api_version: "v1".into(), kind: "Pod".into() };
        Recording {
            format: FORMAT,
            plugin: "replicaset".into(),
            version: "0.1.0".into(),
            digest: "sha256:00".into(),
            recorded_at_ms: 1_700_000_000_000,
            request: RecordedRequest {
                key: "apps/v1/ReplicaSet/shop/web".into(),
                reason: "retry:2".into(),
                last_error: Some("boom".into()),
            },
            reads: vec![
                Read {
                    call: Call::Get {
                        kind: Kind { api_version: "apps/v1".into(), kind: "ReplicaSet".into() },
                        namespace: Some("shop".into()),
                        name: "web".into(),
                    },
                    answer: Answer::Object(Some(r#"{"kind":"ReplicaSet"}"#.into())),
                    over_budget: false,
                },
                Read {
                    call: Call::ListMeta { kind: kind.clone(), namespace: Some("shop".into()), selector: Some("app=web".into()) },
                    answer: Answer::Metas(vec![Meta {
                        namespace: Some("shop".into()),
                        name: "web-1".into(),
                        uid: "u1".into(),
                        resource_version: "7".into(),
                        generation: None,
                        creation_timestamp: None,
                        deletion_timestamp: None,
                        labels: vec![("app".into(), "web".into())],
                        annotations: vec![],
                        owner_references: vec![],
                        finalizers: vec![],
                        fields: vec![Some("\"Running\"".into()), None],
                    }]),
                    over_budget: false,
                },
                Read {
                    call: Call::ByIndex { kind, index: "nope".into(), value: "x".into() },
                    answer: Answer::Error(CacheError { kind: CacheErrorKind::UnknownIndex, message: "no index nope".into() }),
                    over_budget: false,
                },
            ],
            wall_clock: vec![1_700_000_000_123_456_789],
            monotonic_clock: vec![5, 9],
            clock_resolution: Some((1000, 1)),
            random: "00ff10".into(),
            insecure_random: String::new(),
            insecure_seed: Some("2a".into()),
            truncated: false,
            outcome: RecordedOutcome {
                actions: vec![serde_json::json!({"event": {"reason": "X"}})],
                requeue_after_ms: Some(30_000),
                error: None,
            },
        }
    }

    #[test]
    fn a_recording_round_trips_through_json_zst() {
        let rec = sample();
        let bytes = rec.encode(1 << 20).unwrap();
        assert_eq!(&bytes[..4], &[0x28, 0xb5, 0x2f, 0xfd], "zstd frame");
        assert_eq!(Recording::decode(&bytes).unwrap(), rec);
        // Plain JSON (a recording edited by hand) is read too.
        let json = serde_json::to_vec_pretty(&rec).unwrap();
        assert_eq!(Recording::decode(&json).unwrap(), rec);
        let text = String::from_utf8(json).unwrap();
        assert!(text.contains(r#""call": "listMeta""#), "{text}");
        assert!(text.contains(r#""format": 1"#), "{text}");
    }

    #[test]
    fn the_byte_cap_and_the_format_version_are_enforced() {
        let rec = sample();
        let size = rec.encode(1 << 20).unwrap().len();
        assert!(matches!(rec.encode(size - 1), Err(Error::TooLarge { max, .. }) if max == size - 1));
        let mut future = serde_json::to_value(&rec).unwrap();
        future["format"] = 2.into();
        let err = Recording::decode(&serde_json::to_vec(&future).unwrap()).unwrap_err();
        assert_eq!(err.to_string(), "recording format 2, but this host reads format 1");
        assert!(matches!(Recording::decode(b"{\"nope\": 1}"), Err(Error::Json(_))));
        assert!(matches!(Recording::decode(&[0x28, 0xb5, 0x2f, 0xfd, 0, 0]), Err(Error::Zstd(_))));
    }

    #[test]
    fn a_decompression_bomb_is_refused_at_the_cap() {
        use std::io::Write;
        // A recording's first bytes, then 256 MiB of spaces (valid JSON whitespace), streamed:
        // no declared size, so only the cap stops it.
        let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
        enc.write_all(br#"{"format": 1, "plugin": "x""#).unwrap();
        let spaces = vec![b' '; 1 << 20];
        for _ in 0..256 {
            enc.write_all(&spaces).unwrap();
        }
        let bomb = enc.finish().unwrap();
        assert!(bomb.len() < 64 << 10, "the bomb is {} bytes", bomb.len());
        let err = Recording::decode(&bomb).unwrap_err();
        assert!(matches!(err, Error::Decompressed(_)), "{err:?}");
        assert_eq!(err.to_string(), "the recording decompresses to more than 67108864 bytes");
        let err = Recording::decode_within(&bomb, 1 << 20).unwrap_err();
        assert_eq!(err.to_string(), "the recording decompresses to more than 1048576 bytes");
        // Plain JSON is held to the same cap, and a real recording fits well within it.
        let rec = sample();
        let json = serde_json::to_vec(&rec).unwrap();
        let err = Recording::decode_within(&json, 10).unwrap_err();
        assert_eq!(err.to_string(), format!("the recording is {} bytes of JSON, over the 10-byte cap", json.len()));
        assert_eq!(Recording::decode_within(&rec.encode(1 << 20).unwrap(), json.len() as u64).unwrap(), rec);
    }

    #[test]
    fn the_request_comes_back() {
        let rec = sample();
        let request = rec.request.request().unwrap();
        assert_eq!(request.reason, Reason::Retry(2));
        assert_eq!(request.key.to_string(), "apps/v1/ReplicaSet/shop/web");
        assert_eq!(RecordedRequest::of(&request), rec.request);
        let bad = RecordedRequest { reason: "later".into(), ..rec.request };
        assert!(bad.request().is_err());
    }
}
