//! `wasmloop optimize`: make a plugin component smaller by running Binaryen's `wasm-opt` on the
//! core modules inside it, and prove the result is the same plugin to the host.
//!
//! `wasm-opt` reads core modules only, and rustc's `wasm32-wasip2` output is a component: the
//! program's core module plus a few glue modules and the component's types, imports, exports
//! and instances. So the component's top-level sections are walked, each core module of at
//! least [`MIN_MODULE`] bytes is given to `wasm-opt` and spliced back in place; every other
//! section is copied as it is. The core module's imports and exports are what the rest of the
//! component refers to, and `wasm-opt` keeps both, so the component's structure still holds.
//!
//! Nothing is written unless the result compiles in the host's engine, has the same imports,
//! exports and contract version, and its `metadata()` answers exactly what the original's does.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, bail, ensure};
use clap::ValueEnum;
use wasmloop::plugin::{Inspection, PluginEngine};

use super::LoadArgs;

/// Core modules smaller than this (the glue modules a component carries) are left as they are.
pub const MIN_MODULE: usize = 1024;

/// The features of the core modules rustc and the other toolchains emit today, which the host's
/// engine accepts: `wasm-opt` must be told, and must not use any other.
const FEATURES: [&str; 6] = [
    "--enable-bulk-memory",
    "--enable-sign-ext",
    "--enable-mutable-globals",
    "--enable-nontrapping-float-to-int",
    "--enable-multivalue",
    "--enable-reference-types",
];

/// `wasm-opt`'s optimisation goal.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Level {
    /// Smallest code (`-Oz`).
    Oz,
    /// Small code, speed kept (`-Os`).
    Os,
    /// Speed (`-O3`).
    O3,
}

impl Level {
    fn flag(self) -> &'static str {
        match self {
            Self::Oz => "-Oz",
            Self::Os => "-Os",
            Self::O3 => "-O3",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct OptimizeArgs {
    /// The plugin component (.wasm).
    plugin: PathBuf,
    /// Where to write the optimised component (default: over the input).
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// The `wasm-opt` program (Binaryen, version 108 or newer).
    #[arg(long, env = "WASMLOOP_WASM_OPT", default_value = "wasm-opt")]
    wasm_opt: PathBuf,
    /// What to optimise for.
    #[arg(long, value_enum, default_value = "oz")]
    level: Level,
    #[command(flatten)]
    load: LoadArgs,
}

pub fn run(args: OptimizeArgs) -> anyhow::Result<ExitCode> {
    let path = &args.plugin;
    let original = args.load.read_plugin(path)?;
    let limits = args.load.load_limits()?;
    let sections = sections(&original).with_context(|| format!("{}: not a well-formed component", path.display()))?;
    ensure!(sections.iter().any(Section::optimisable), "{} holds no core module to optimise", path.display());
    let work = tempfile::tempdir().context("creating a temporary directory")?;
    let mut optimized = original[..PREAMBLE].to_vec();
    for (i, s) in sections.iter().enumerate() {
        let body = &original[s.body.clone()];
        if s.optimisable() {
            let smaller = wasm_opt(&args, body, &work.path().join(format!("module-{i}")))
                .with_context(|| format!("optimising the core module at byte {} of {}", s.body.start, path.display()))?;
            push_section(&mut optimized, s.id, &smaller);
        } else {
            push_section(&mut optimized, s.id, body);
        }
    }

    limits.check_size(optimized.len()).context("the optimised component")?;
    let engine = args.load.engine(wasmloop::plugin::Limits::default().memory)?;
    let before = describe(&engine, &original).with_context(|| format!("loading {}", path.display()))?;
    let after = describe(&engine, &optimized).context("loading the optimised component")?;
    same_plugin(&before, &after).context("the optimised component is not the same plugin; nothing written")?;

    let out = args.output.as_deref().unwrap_or(path);
    write_atomically(out, &optimized)?;
    let saved = 100.0 * (1.0 - optimized.len() as f64 / original.len() as f64);
    println!("{}: {} → {} bytes ({saved:.1}% smaller), same imports, exports and metadata", out.display(), original.len(), optimized.len());
    Ok(ExitCode::SUCCESS)
}

/// The 8-byte preamble of a component (magic, version, layer).
const PREAMBLE: usize = 8;
/// The section id of a core module inside a component.
const CORE_MODULE: u8 = 1;

/// One top-level section of a component: its id and where its body lies.
#[derive(Debug, PartialEq)]
struct Section {
    id: u8,
    body: std::ops::Range<usize>,
}

impl Section {
    /// A core module big enough to be the program (not a component's glue).
    fn optimisable(&self) -> bool {
        self.id == CORE_MODULE && self.body.len() >= MIN_MODULE
    }
}

/// The top-level sections of a component (nested components and modules are bodies, not walked).
fn sections(bytes: &[u8]) -> anyhow::Result<Vec<Section>> {
    ensure!(bytes.len() >= PREAMBLE && bytes[..4] == *b"\0asm", "no wasm magic number");
    // Version 0x0d, layer 1: a component (a core module has layer 0).
    ensure!(
        bytes[4..8] == [0x0d, 0x00, 0x01, 0x00],
        "a core module or an unknown component encoding, not a component (preamble {:02x?})",
        &bytes[4..8]
    );
    let mut at = PREAMBLE;
    let mut out = Vec::new();
    while at < bytes.len() {
        let id = bytes[at];
        let (len, start) = leb128_u32(bytes, at + 1).with_context(|| format!("section at byte {at}: bad length"))?;
        let end = start.checked_add(len as usize).filter(|&e| e <= bytes.len());
        let Some(end) = end else { bail!("section at byte {at}: {len} bytes announced, {} left", bytes.len() - start) };
        out.push(Section { id, body: start..end });
        at = end;
    }
    Ok(out)
}

/// An unsigned LEB128 `u32` at `at`: its value and the offset after it.
fn leb128_u32(bytes: &[u8], mut at: usize) -> anyhow::Result<(u32, usize)> {
    let mut value: u32 = 0;
    for shift in (0..35).step_by(7) {
        let Some(&byte) = bytes.get(at) else { bail!("ends inside a LEB128 number") };
        at += 1;
        let bits = u32::from(byte & 0x7f);
        ensure!(shift < 32 && (shift == 0 || bits >> (32 - shift) == 0), "LEB128 number larger than u32");
        value |= bits << shift;
        if byte & 0x80 == 0 {
            return Ok((value, at));
        }
    }
    bail!("LEB128 number longer than 5 bytes")
}

fn push_section(out: &mut Vec<u8>, id: u8, body: &[u8]) {
    out.push(id);
    push_leb128(out, body.len());
    out.extend_from_slice(body);
}

/// `len` as unsigned LEB128.
fn push_leb128(out: &mut Vec<u8>, mut len: usize) {
    loop {
        let byte = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
}

/// `module` through `wasm-opt` (files `<stem>.wasm` → `<stem>.opt.wasm`).
fn wasm_opt(args: &OptimizeArgs, module: &[u8], stem: &Path) -> anyhow::Result<Vec<u8>> {
    let (input, output) = (stem.with_extension("wasm"), stem.with_extension("opt.wasm"));
    std::fs::write(&input, module)?;
    let result = Command::new(&args.wasm_opt)
        .arg(args.level.flag())
        .args(FEATURES)
        .arg(&input)
        .arg("-o")
        .arg(&output)
        .output()
        .with_context(|| format!("running {} (install Binaryen, or name it with --wasm-opt)", args.wasm_opt.display()))?;
    if !result.status.success() {
        bail!("{} {}: {}", args.wasm_opt.display(), result.status, String::from_utf8_lossy(&result.stderr).trim());
    }
    Ok(std::fs::read(&output)?)
}

/// Compile `bytes` (no precompiled cache: the optimised bytes are new) and describe them.
fn describe(engine: &PluginEngine, bytes: &[u8]) -> anyhow::Result<Inspection> {
    Ok(wasmloop::plugin::inspect(engine, bytes)?)
}

/// Whether the host sees the same plugin in both: imports, exports, contract version and what
/// `metadata()` answers.
fn same_plugin(before: &Inspection, after: &Inspection) -> anyhow::Result<()> {
    if let Some(e) = &before.metadata_error {
        bail!("the original's metadata() fails: {e}");
    }
    ensure!(before.imports == after.imports, "imports differ: {:?} → {:?}", before.imports, after.imports);
    ensure!(before.exports == after.exports, "exports differ: {:?} → {:?}", before.exports, after.exports);
    ensure!(before.wit_package_version == after.wit_package_version, "contract versions differ");
    if let Some(e) = &after.metadata_error {
        bail!("metadata() fails: {e}");
    }
    ensure!(before.metadata == after.metadata, "metadata() answers differ");
    Ok(())
}

/// Write `bytes` to `path` through a temporary file beside it, so a failure leaves `path` as it was.
fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).with_context(|| format!("writing beside {}", path.display()))?;
    std::io::Write::write_all(&mut tmp, bytes)?;
    tmp.persist(path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component(sections: &[(u8, &[u8])]) -> Vec<u8> {
        let mut out = b"\0asm\x0d\x00\x01\x00".to_vec();
        for (id, body) in sections {
            push_section(&mut out, *id, body);
        }
        out
    }

    #[test]
    fn sections_are_walked_and_written_back_byte_for_byte() {
        let big = vec![7u8; 300]; // a two-byte length
        let bytes = component(&[(7, b"types"), (CORE_MODULE, &big), (0, b"\x04namecustom")]);
        let found = sections(&bytes).unwrap();
        assert_eq!(found.iter().map(|s| (s.id, s.body.len())).collect::<Vec<_>>(), vec![(7, 5), (1, 300), (0, 11)]);
        let mut again = bytes[..PREAMBLE].to_vec();
        for s in &found {
            push_section(&mut again, s.id, &bytes[s.body.clone()]);
        }
        assert_eq!(again, bytes);
    }

    #[test]
    fn a_core_module_or_a_truncated_component_is_refused_with_where() {
        let module = b"\0asm\x01\x00\x00\x00".to_vec();
        assert!(sections(&module).unwrap_err().to_string().contains("not a component"));
        let mut truncated = component(&[(CORE_MODULE, &[1, 2, 3, 4])]);
        truncated.truncate(truncated.len() - 2);
        let e = sections(&truncated).unwrap_err().to_string();
        assert!(e.contains("section at byte 8") && e.contains("4 bytes announced, 2 left"), "{e}");
        let overlong = [b"\0asm\x0d\x00\x01\x00".as_slice(), &[1, 0xff, 0xff, 0xff, 0xff, 0x7f]].concat();
        assert!(format!("{:#}", sections(&overlong).unwrap_err()).contains("larger than u32"));
    }

    #[test]
    fn leb128_lengths_round_trip() {
        for n in [0usize, 1, 127, 128, 300, 16_383, 16_384, 328_774, u32::MAX as usize] {
            let mut out = vec![0xaa];
            push_leb128(&mut out, n);
            assert_eq!(leb128_u32(&out, 1).unwrap(), (n as u32, out.len()), "{n}");
        }
    }
}
