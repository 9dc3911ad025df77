//! The runner of the fuzz harnesses (`fuzz_*` tests) of this crate and of the host (through the
//! `fuzz` feature): proptest strategies fed to a decoder, counted, for a number of cases or a
//! time budget.
//!
//! - `WASMLOOP_FUZZ_CASES` (default 256): cases per target, the smoke pass `cargo test` runs;
//! - `WASMLOOP_FUZZ_SECONDS`: run each target in batches until that many seconds have passed
//!   (`scripts/fuzz.sh 300s`) instead.
//!
//! Each target prints `fuzz <target>: N cases (A accepted) in T` (shown with `--nocapture`):
//! the test returns whether the decoder accepted its input, which shows a generator that never
//! gets past the first check. A failing case is shrunk, reported, and its seed saved under
//! `proptest-regressions/` (commit it: every later run replays it first); the input itself
//! becomes a named regression test beside the harness.

use std::cell::Cell;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::Value;

/// The number in environment variable `name`, if set.
fn env_number(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(text.trim().parse().unwrap_or_else(|_| panic!("{name}={text:?} is not a number")))
}

/// Run `test` on inputs from `strategy` (see the module doc); `test` returns whether the decoder
/// accepted the input. `source_file` is `file!()`, where proptest keeps the seeds of failures
/// (`proptest-regressions/` beside `src/`).
pub fn run<S>(source_file: &'static str, target: &str, strategy: S, test: impl Fn(S::Value) -> Result<bool, TestCaseError>)
where
    S: Strategy,
    S::Value: Debug,
{
    run_costly(source_file, target, 1, strategy, test);
}

/// [`run`] for a target whose cases cost about `cost` times an ordinary one's: it runs
/// `1/cost` of the cases (at least one), so the smoke pass stays quick. A time budget is
/// unaffected.
pub fn run_costly<S>(
    source_file: &'static str,
    target: &str,
    cost: u64,
    strategy: S,
    test: impl Fn(S::Value) -> Result<bool, TestCaseError>,
) where
    S: Strategy,
    S::Value: Debug,
{
    let cases = (env_number("WASMLOOP_FUZZ_CASES").unwrap_or(256) / cost).max(1);
    let deadline = env_number("WASMLOOP_FUZZ_SECONDS").map(|s| Instant::now() + Duration::from_secs(s));
    let (executed, accepted) = (Cell::new(0u64), Cell::new(0u64));
    let start = Instant::now();
    loop {
        let batch = if deadline.is_some() { (2_000 / cost).max(1) } else { cases };
        let config = Config { cases: u32::try_from(batch).unwrap_or(u32::MAX), source_file: Some(source_file), ..Config::default() };
        let mut runner = TestRunner::new(config);
        let result = runner.run(&strategy, |input| {
            executed.set(executed.get() + 1);
            accepted.set(accepted.get() + u64::from(test(input)?));
            Ok(())
        });
        if let Err(e) = result {
            panic!("fuzz {target}: failed after {} cases: {e}", executed.get());
        }
        if deadline.is_none_or(|d| Instant::now() >= d) {
            break;
        }
    }
    eprintln!("fuzz {target}: {} cases ({} accepted) in {:.1?}", executed.get(), accepted.get(), start.elapsed());
}

/// Any JSON value, nested a few levels, with keys that the paths under test use (so lookups hit)
/// as well as arbitrary ones.
pub fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        "[a-z0-9]{0,3}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((json_key(), inner), 0..6).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// An object key: one of the names paths and selectors use, or anything.
pub fn json_key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(&["metadata", "labels", "annotations", "spec", "status", "app", "0", "1", "a", "example.com/x"][..])
            .prop_map(str::to_owned),
        1 => any::<String>(),
    ]
}
