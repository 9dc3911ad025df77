//! [`Body`]: a cached object's JSON text, compressed against its kind's [`Dictionary`] once the
//! kind has enough objects to build one.
//!
//! Objects of one kind repeat each other almost entirely (the same keys, the same template,
//! the same images): a zstd dictionary made of a sample of them turns a 1.2 KB Pod into
//! tens of bytes. Reads decompress (a few microseconds for a Pod, with a per-thread context);
//! a store below [`DICTIONARY_AT`](super::DICTIONARY_AT) objects keeps plain text and pays nothing.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use zstd::zstd_safe::{CCtx, CDict, DCtx, DDict};

use super::{Error, Result};

/// zstd level for cached objects: the fastest, whose match tables stay small (tens of KB per
/// dictionary); the dictionary, not the level, is what makes objects small.
const LEVEL: i32 = 1;

/// A zstd dictionary (raw content: sample objects), prepared for both directions.
pub struct Dictionary {
    compress: CDict<'static>,
    decompress: DDict<'static>,
    /// The dictionary's own size in bytes (its content).
    size: usize,
}

impl Dictionary {
    /// A dictionary of at most `max_size` bytes made of `samples` themselves, concatenated (a
    /// zstd raw-content dictionary: a compressed object refers back to the long runs it shares
    /// with them). None without samples. A dictionary trained by zstd (`ZDICT`) compresses
    /// 10–20% better, but training held megabytes of tables that the allocator kept: measured
    /// against the API server, +12 MiB host RSS at 1 000 Pods, more than compressing saved.
    pub fn from_samples<S: AsRef<[u8]>>(samples: &[S], max_size: usize) -> Option<Arc<Self>> {
        let mut content = Vec::with_capacity(max_size);
        for sample in samples {
            let room = max_size - content.len();
            let sample = sample.as_ref();
            content.extend_from_slice(&sample[..sample.len().min(room)]);
            if content.len() == max_size {
                break;
            }
        }
        if content.len() < 8 {
            return None;
        }
        Some(Arc::new(Self { compress: CDict::try_create(&content, LEVEL)?, decompress: DDict::create(&content), size: content.len() }))
    }

    /// Bytes of the dictionary's content.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Heap bytes the prepared dictionaries use (content, match tables, entropy tables).
    pub fn heap_bytes(&self) -> usize {
        self.compress.sizeof() + self.decompress.sizeof()
    }
}

impl fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dictionary").field("size", &self.size).finish_non_exhaustive()
    }
}

thread_local! {
    static COMPRESSOR: RefCell<CCtx<'static>> = RefCell::new(CCtx::create());
    static DECOMPRESSOR: RefCell<DCtx<'static>> = RefCell::new(DCtx::create());
}

/// A cached object's JSON: as is, or compressed with its kind's dictionary.
pub(super) enum Body {
    /// The text itself.
    Plain(Box<str>),
    /// zstd frame of the text, made with `dict`.
    Packed {
        /// The dictionary it was compressed with (kept alive by every object using it).
        dict: Arc<Dictionary>,
        /// Length of the text.
        len: u32,
        /// The frame.
        frame: Box<[u8]>,
    },
}

impl Body {
    /// `text`, compressed with `dict` if there is one and that makes it smaller.
    pub(super) fn new(text: String, dict: Option<&Arc<Dictionary>>) -> Self {
        match dict {
            Some(dict) => Self::pack(&text, dict).unwrap_or_else(|| Self::Plain(text.into_boxed_str())),
            None => Self::Plain(text.into_boxed_str()),
        }
    }

    /// `text` compressed with `dict`; None if that fails or does not save bytes.
    pub(super) fn pack(text: &str, dict: &Arc<Dictionary>) -> Option<Self> {
        let len = u32::try_from(text.len()).ok()?;
        let mut frame = Vec::with_capacity(zstd::zstd_safe::compress_bound(text.len()));
        COMPRESSOR.with_borrow_mut(|ctx| ctx.compress_using_cdict(&mut frame, text.as_bytes(), &dict.compress)).ok()?;
        (frame.len() < text.len()).then(|| Self::Packed { dict: dict.clone(), len, frame: frame.into_boxed_slice() })
    }

    /// True if compressed.
    pub(super) fn is_packed(&self) -> bool {
        matches!(self, Self::Packed { .. })
    }

    /// Length of the text, without decompressing it.
    pub(super) fn len(&self) -> usize {
        match self {
            Self::Plain(text) => text.len(),
            Self::Packed { len, .. } => *len as usize,
        }
    }

    /// Heap bytes held for the text (the frame when compressed; the dictionary is shared).
    pub(super) fn stored_bytes(&self) -> usize {
        match self {
            Self::Plain(text) => text.len(),
            Self::Packed { frame, .. } => frame.len(),
        }
    }

    /// The text: borrowed when plain, decompressed when packed. `key` names the object in the
    /// error, which only a corrupted frame could cause.
    pub(super) fn text(&self, key: &str) -> Result<Cow<'_, str>> {
        let (dict, len, frame) = match self {
            Self::Plain(text) => return Ok(Cow::Borrowed(text)),
            Self::Packed { dict, len, frame } => (dict, *len as usize, frame),
        };
        let corrupt = |reason: String| Error::InvalidObject(format!("{key}: cached text does not decompress: {reason}"));
        let mut out = Vec::with_capacity(len);
        let written = DECOMPRESSOR
            .with_borrow_mut(|ctx| ctx.decompress_using_ddict(&mut out, frame, &dict.decompress))
            .map_err(|code| corrupt(zstd::zstd_safe::get_error_name(code).to_string()))?;
        if written != len {
            return Err(corrupt(format!("{written} bytes, expected {len}")));
        }
        String::from_utf8(out).map(Cow::Owned).map_err(|e| corrupt(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(i: usize) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"web-{i}","namespace":"prod","uid":"u-{i:08}","labels":{{"app":"web"}}}},"spec":{{"containers":[{{"name":"web","image":"registry.example/web:1.{}"}}],"nodeName":"node-{}"}}}}"#,
            i % 3,
            i % 7
        )
    }

    fn dictionary() -> Arc<Dictionary> {
        let samples: Vec<String> = (0..500).map(pod).collect();
        Dictionary::from_samples(&samples[490..], 4096).expect("samples make a dictionary")
    }

    #[test]
    fn plain_without_a_dictionary() {
        let body = Body::new(pod(1), None);
        assert!(!body.is_packed());
        assert_eq!(body.text("k").unwrap(), pod(1));
        assert!(matches!(body.text("k").unwrap(), Cow::Borrowed(_)));
    }

    #[test]
    fn packed_round_trips_and_is_much_smaller() {
        let dict = dictionary();
        for i in [0, 7, 499, 10_000] {
            let body = Body::new(pod(i), Some(&dict));
            assert!(body.is_packed(), "object {i} packed");
            assert_eq!(body.len(), pod(i).len());
            assert_eq!(body.text("k").unwrap(), pod(i), "object {i} round-trips");
            assert!(body.stored_bytes() * 3 < pod(i).len(), "{} of {} bytes", body.stored_bytes(), pod(i).len());
        }
    }

    #[test]
    fn text_unlike_the_samples_still_round_trips() {
        let dict = dictionary();
        let odd = r#"{"kind":"Secret","data":{"k":"ÿ€ unicode, not like the samples at all"}}"#.repeat(5);
        let body = Body::new(odd.clone(), Some(&dict));
        assert_eq!(body.text("k").unwrap(), odd);
        // Too short to gain anything: kept plain.
        assert!(!Body::new("{}".into(), Some(&dict)).is_packed());
    }

    #[test]
    fn a_corrupt_frame_is_an_error_naming_the_object() {
        let dict = dictionary();
        let Body::Packed { dict, len, frame } = Body::new(pod(3), Some(&dict)) else { panic!("packed") };
        let truncated = frame[..frame.len() - 2].into();
        let corrupt = Body::Packed { dict, len, frame: truncated };
        let err = corrupt.text("prod/web-3");
        assert!(matches!(&err, Err(Error::InvalidObject(m)) if m.starts_with("prod/web-3: cached text does not decompress")), "{err:?}");
    }

    #[test]
    fn no_samples_make_no_dictionary() {
        assert!(Dictionary::from_samples::<&str>(&[], 4096).is_none());
        assert_eq!(Dictionary::from_samples(&[pod(1), pod(2)], 100).unwrap().size(), 100, "cut at the maximum");
    }

    #[test]
    fn each_thread_decompresses_with_its_own_context() {
        let dict = dictionary();
        let bodies: Arc<Vec<Body>> = Arc::new((0..64).map(|i| Body::new(pod(i), Some(&dict))).collect());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let bodies = bodies.clone();
                std::thread::spawn(move || (0..64).all(|i| bodies[i].text("k").unwrap() == pod(i)))
            })
            .collect();
        assert!(threads.into_iter().all(|t| t.join().unwrap()));
    }
}
