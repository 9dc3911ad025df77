//! Untrusted input read within a byte cap: a file by its size (checked before and while it is
//! read, so a huge file or an endless stream such as `/dev/zero` costs at most the cap), and a
//! zstd stream by what it decompresses to, with the window the decoder may allocate bounded by
//! the same cap (a frame that asks for a larger one is refused, not given the memory).
//!
//! The offline commands read what a user hands them through here: a recording (`wasmloop
//! replay`), object files and manifests (`wasmloop reconcile`), plugin components.

use std::io::Read;
use std::path::{Path, PathBuf};

/// Why bounded input could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is larger than the cap.
    #[error("{}: {} is over the {max}-byte limit", path.display(), describe(*size))]
    FileTooLarge {
        /// The file.
        path: PathBuf,
        /// Its size, when the file system says (`None`: a stream that went on past the cap).
        size: Option<u64>,
        /// The cap.
        max: u64,
    },
    /// The zstd stream decompresses to more than the cap.
    #[error("decompresses to more than {max} bytes{}", declared.map(|d| format!(" (its frame declares {d})")).unwrap_or_default())]
    Decompressed {
        /// The cap.
        max: u64,
        /// The size the frame header declares, when it declares one.
        declared: Option<u64>,
    },
    /// The zstd stream is corrupt or truncated, or asks for a window larger than the cap allows.
    #[error("zstd: {0}")]
    Zstd(#[source] std::io::Error),
}

fn describe(size: Option<u64>) -> String {
    match size {
        Some(n) => format!("{n} bytes"),
        None => "the stream".to_string(),
    }
}

/// A result whose error is bounded input's.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The zstd magic number, which every frame starts with.
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// The whole of the file at `path`, refused if it is (or turns out to be) over `max` bytes.
pub fn read_file(path: &Path, max: u64) -> Result<Vec<u8>> {
    let io = |source| Error::Io { path: path.to_owned(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    let size = file.metadata().ok().filter(std::fs::Metadata::is_file).map(|m| m.len());
    if let Some(size) = size.filter(|&s| s > max) {
        return Err(Error::FileTooLarge { path: path.to_owned(), size: Some(size), max });
    }
    let mut out = Vec::with_capacity(usize::try_from(size.unwrap_or(0)).unwrap_or(0));
    file.take(max.saturating_add(1)).read_to_end(&mut out).map_err(io)?;
    if out.len() as u64 > max {
        return Err(Error::FileTooLarge { path: path.to_owned(), size, max });
    }
    Ok(out)
}

/// The file at `path` as UTF-8 text, within `max` bytes.
pub fn read_text(path: &Path, max: u64) -> Result<String> {
    let bytes = read_file(path, max)?;
    String::from_utf8(bytes)
        .map_err(|e| Error::Io { path: path.to_owned(), source: std::io::Error::new(std::io::ErrorKind::InvalidData, e) })
}

/// `bytes` (one or more zstd frames) decompressed, refused past `max` bytes of output: a frame
/// that declares more is refused before anything is decompressed; one that does not say is
/// decompressed up to the cap and no further. The decoder's window is capped at the power of two
/// at or above `max` (at least 1 MiB), so what it allocates stays within about twice the cap.
pub fn zstd(bytes: &[u8], max: u64) -> Result<Vec<u8>> {
    let declared = zstd::zstd_safe::get_frame_content_size(bytes).ok().flatten();
    if declared.is_some_and(|d| d > max) {
        return Err(Error::Decompressed { max, declared });
    }
    let mut decoder = zstd::stream::read::Decoder::with_buffer(bytes).map_err(Error::Zstd)?;
    decoder.window_log_max(window_log(max)).map_err(Error::Zstd)?;
    let mut out = Vec::with_capacity(usize::try_from(declared.unwrap_or(0)).unwrap_or(0));
    decoder.take(max.saturating_add(1)).read_to_end(&mut out).map_err(Error::Zstd)?;
    if out.len() as u64 > max {
        return Err(Error::Decompressed { max, declared });
    }
    Ok(out)
}

/// log2 of the largest window a decoder bounded by `max` may use: the power of two at or above
/// `max`, within zstd's limits (2^20 .. 2^31).
fn window_log(max: u64) -> u32 {
    let log = u64::BITS - max.saturating_sub(1).leading_zeros();
    log.clamp(20, 31)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn files_are_read_within_the_cap_and_refused_past_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        assert_eq!(read_file(&p, 10).unwrap(), b"0123456789");
        let err = read_file(&p, 9).unwrap_err();
        assert!(matches!(err, Error::FileTooLarge { size: Some(10), max: 9, .. }), "{err:?}");
        assert!(err.to_string().ends_with("/f: 10 bytes is over the 9-byte limit"), "{err}");
        // A stream with no size: cut off at the cap.
        let err = read_file(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(err.to_string(), "/dev/zero: the stream is over the 1048576-byte limit");
        assert!(matches!(read_file(&dir.path().join("missing"), 1), Err(Error::Io { .. })));
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(read_text(&p, 10).unwrap_err().to_string().contains("invalid utf-8"));
    }

    /// A frame of `n` zeros written by a streaming encoder, which declares no size.
    fn undeclared_zeros(n: usize) -> Vec<u8> {
        let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
        let chunk = vec![0u8; 1 << 20];
        let mut left = n;
        while left > 0 {
            let k = left.min(chunk.len());
            enc.write_all(&chunk[..k]).unwrap();
            left -= k;
        }
        enc.finish().unwrap()
    }

    #[test]
    fn zstd_output_is_capped_whether_or_not_the_frame_declares_its_size() {
        let small = zstd::bulk::compress(b"hello", 3).unwrap();
        assert_eq!(zstd(&small, 5).unwrap(), b"hello");
        // Declared: refused before decompressing.
        let declared = zstd::bulk::compress(&vec![0u8; 10 << 20], 3).unwrap();
        let err = zstd(&declared, 1 << 20).unwrap_err();
        assert!(matches!(err, Error::Decompressed { max: 1_048_576, declared: Some(10_485_760) }), "{err:?}");
        // Not declared: decompressed up to the cap, then refused.
        let bomb = undeclared_zeros(32 << 20);
        assert!(bomb.len() < 4096, "32 MiB of zeros compress to {} bytes", bomb.len());
        let err = zstd(&bomb, 1 << 20).unwrap_err();
        assert_eq!(err.to_string(), "decompresses to more than 1048576 bytes");
        assert_eq!(zstd(&bomb, 32 << 20).unwrap().len(), 32 << 20);
        // Two frames: both count.
        let mut two = small.clone();
        two.extend_from_slice(&small);
        assert_eq!(zstd(&two, 10).unwrap(), b"hellohello");
        assert!(zstd(&two, 9).is_err());
        assert!(matches!(zstd(&[0x28, 0xb5, 0x2f, 0xfd, 0, 0], 10), Err(Error::Zstd(_))));
    }

    #[test]
    fn a_frame_asking_for_a_window_over_the_cap_is_refused() {
        // Window 2^27 (long-distance matching), declared size unknown.
        let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        enc.long_distance_matching(true).unwrap();
        enc.window_log(27).unwrap();
        enc.write_all(&[7u8; 4096]).unwrap();
        let frame = enc.finish().unwrap();
        let err = zstd(&frame, 1 << 20).unwrap_err();
        assert!(matches!(err, Error::Zstd(_)), "{err:?}");
        assert_eq!(zstd(&frame, 1 << 27).unwrap().len(), 4096);
        assert_eq!((window_log(0), window_log(1 << 20), window_log((1 << 20) + 1), window_log(u64::MAX)), (20, 20, 21, 31));
    }
}
