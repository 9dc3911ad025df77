//! Sandbox tests of the Wasm plugin runtime: misbehaving plugins are contained, the host and the
//! well-behaved plugin keep working.
//!
//! They load the test plugins of `tests/plugins/` from `$WASMLOOP_PLUGIN_DIR` (default
//! `<workspace>/target/wasm32-wasip2/plugin/`); build them first with
//! `scripts/build-test-plugins.sh`. A missing plugin fails the test. No cluster is needed: the
//! cache is an in-memory `CacheView`.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wasmloop::actions::{Action, Event, Planned};
use wasmloop::cache::{CacheView, SharedCache};
use wasmloop::controller::{Outcome, Reason, ReconcileError, Reconciler, Request};
use wasmloop::grants::Grants;
use wasmloop::kinds::{KindRef, ObjectKey};
use wasmloop::plugin::{ByteSize, Limits, Origin, PluginEngine, PrecompiledCache, WasmPlugin, inspect};

fn plugin_dir() -> PathBuf {
    match std::env::var_os("WASMLOOP_PLUGIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/wasm32-wasip2/plugin"),
    }
}

fn plugin_bytes(name: &str) -> Vec<u8> {
    let path = plugin_dir().join(format!("{}.wasm", name.replace('-', "_")));
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("test plugin {} not readable ({e}): run scripts/build-test-plugins.sh first", path.display()))
}

/// One engine for the whole test binary (as in the host process).
fn engine() -> &'static PluginEngine {
    static ENGINE: OnceLock<PluginEngine> = OnceLock::new();
    ENGINE.get_or_init(|| PluginEngine::new().expect("engine"))
}

/// Compiled components survive across test runs here (and the tests exercise the cache).
fn shared_cache() -> PrecompiledCache {
    PrecompiledCache::new(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wasmloop-precompiled")).expect("cache dir")
}

fn grants(plugin: &str, yaml: &str) -> Grants {
    Grants::from_yaml(plugin, yaml).expect("grants")
}

/// Read + update-status + event on ConfigMaps everywhere.
fn config_map_grants(plugin: &str) -> Grants {
    grants(plugin, "grants:\n  - kinds: [v1/ConfigMap]\n    verbs: [read, update-status, event]\n")
}

fn load_with(name: &str, limits: Limits, grants: Grants) -> Result<WasmPlugin, wasmloop::plugin::Error> {
    let compiled = shared_cache().load_or_compile(engine(), &plugin_bytes(name))?;
    WasmPlugin::from_compiled(engine(), compiled, limits, grants)
}

fn load(name: &str, limits: Limits) -> WasmPlugin {
    load_with(name, limits, config_map_grants(name)).unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

fn config_map(ns: &str, name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{ns}-{name}")}, "data": data})
}

fn cache_of(objects: Vec<Value>) -> SharedCache {
    Arc::new(CacheView::from_objects(objects).expect("cache view"))
}

fn request(ns: &str, name: &str) -> Request {
    Request::new(ObjectKey::new(KindRef::new("v1", "ConfigMap"), Some(ns), name))
}

fn status_of(outcome: &Outcome) -> &Value {
    match outcome.actions.as_slice() {
        [one] => match one.action() {
            Action::UpdateStatus { status, .. } => status,
            other => panic!("expected an update-status, got {other:?}"),
        },
        other => panic!("expected one update-status, got {other:?}"),
    }
}

/// The good plugin still works: this is run after each misbehaving one.
fn assert_echo_works() {
    let echo = load("echo", Limits::default());
    let cache = cache_of(vec![config_map("default", "web", json!({"a": "b"}))]);
    let outcome = echo.reconcile(&request("default", "web"), &cache).expect("echo reconciles");
    assert_eq!(status_of(&outcome)["callsInThisInstance"], 1);
}

fn transient(r: Result<Outcome, ReconcileError>) -> String {
    match r {
        Err(e) if e.is_transient() => e.to_string(),
        other => panic!("expected a transient error, got {other:?}"),
    }
}

fn permanent(r: Result<Outcome, ReconcileError>) -> String {
    match r {
        Err(e) if !e.is_transient() => e.to_string(),
        other => panic!("expected a permanent error, got {other:?}"),
    }
}

#[test]
fn echo_gets_a_fresh_instance_for_every_reconcile() {
    let echo = load("echo", Limits::default());
    assert_eq!(echo.name(), "echo");
    assert_eq!(echo.contract_version(), "0.2.0");
    assert!(echo.digest().starts_with("sha256:") && echo.size() > 1000);
    let cache = cache_of(vec![config_map("default", "web", json!({"k": "v"}))]);
    for _ in 0..3 {
        let outcome = echo.reconcile(&request("default", "web"), &cache).unwrap();
        let status = status_of(&outcome);
        assert_eq!(status["callsInThisInstance"], 1, "guest state leaked between reconciles: {status}");
        assert_eq!(status["reason"], "event");
        assert!(status["observedBytes"].as_u64().unwrap() > 20, "{status}");
        // Contract 0.2: the metadata read and the declared field `data.k`.
        assert_eq!((&status["metaName"], &status["declaredField"]), (&json!("web"), &json!("v")), "{status}");
        assert_eq!(status["lastError"], Value::Null);
        assert_eq!(outcome.requeue_after, Some(Duration::from_secs(30)));
    }
    let failing = Request { last_error: Some("create v1/Pod/a/b: quota".into()), ..request("default", "web") };
    assert_eq!(status_of(&echo.reconcile(&failing, &cache).unwrap())["lastError"], "create v1/Pod/a/b: quota");
    let missing = echo.reconcile(&request("default", "absent"), &cache).unwrap();
    assert!(missing.actions.is_empty());
    let retry = Request { reason: Reason::Retry(3), ..request("default", "web") };
    assert_eq!(status_of(&echo.reconcile(&retry, &cache).unwrap())["reason"], "retry-3");
    let stats = echo.stats();
    assert_eq!((stats.calls, stats.ok, stats.traps, stats.timeouts, stats.ooms), (6, 6, 0, 0, 0));

    // Per-reconcile cost with a fresh Store each time.
    let n = 200;
    let started = Instant::now();
    for _ in 0..n {
        echo.reconcile(&request("default", "web"), &cache).unwrap();
    }
    let per_call = started.elapsed() / n;
    eprintln!("echo: {per_call:?} per reconcile (fresh Store + instantiate + call)");
    assert!(per_call < Duration::from_millis(100), "{per_call:?} per reconcile");
}

#[test]
fn an_infinite_loop_times_out_and_the_host_keeps_running() {
    let timeout = Duration::from_millis(200);
    let spin = load("spin-loop", Limits { timeout, ..Limits::default() });
    let cache = cache_of(vec![config_map("default", "web", json!({}))]);
    for attempt in 1..=2 {
        let started = Instant::now();
        let msg = transient(spin.reconcile(&request("default", "web"), &cache));
        let took = started.elapsed();
        eprintln!("spin-loop attempt {attempt} failed after {took:?}: {msg}");
        assert!(msg.contains("plugin spin-loop timed out") && msg.contains("200ms limit"), "{msg}");
        assert!(took >= timeout && took < timeout + Duration::from_secs(1), "attempt {attempt} took {took:?}");
    }
    let stats = spin.stats();
    assert_eq!((stats.timeouts, stats.traps, stats.ooms, stats.ok), (2, 0, 0, 0));
    assert_echo_works();
}

/// A shadow candidate gives way to serving calls: a candidate computing forever is paused while
/// a serving call is in flight (started 50 ms into its call, held 1 s), and its 200 ms timeout
/// counts only the time it ran: it times out after about 1.2 s, not 200 ms.
#[test]
fn a_candidate_pauses_while_a_serving_call_is_in_flight() {
    let timeout = Duration::from_millis(200);
    let spin = Arc::new(load("spin-loop", Limits { timeout, ..Limits::default() }));
    let cache = cache_of(vec![config_map("default", "web", json!({}))]);
    let started = Instant::now();
    let candidate = std::thread::spawn(move || spin.reconcile_as_candidate(&request("default", "web"), &cache));
    std::thread::sleep(Duration::from_millis(50));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(wasmloop::plugin::guest_threads::run(|| std::thread::sleep(Duration::from_secs(1)))).unwrap();
    let msg = transient(candidate.join().unwrap());
    let took = started.elapsed();
    eprintln!("candidate spin-loop failed after {took:?}: {msg}");
    assert!(msg.contains("plugin spin-loop timed out") && msg.contains("200ms limit"), "{msg}");
    assert!(took >= Duration::from_millis(1150), "the candidate ran beside the serving call: it ended after {took:?}");
    assert!(took < Duration::from_secs(4), "the candidate took {took:?}");
}

/// A guest sleeping in WASI `poll` cannot hold its instance past the deadline: the call is
/// cancelled at the deadline (no epoch can interrupt a guest waiting in the host).
#[test]
fn a_sleeping_guest_times_out_at_its_deadline() {
    let timeout = Duration::from_millis(200);
    let sleeper = load("hostile", Limits { timeout, ..Limits::default() });
    let cache = cache_of(vec![config_map("default", "sleepy", json!({"sleepMs": "30000"}))]);
    for attempt in 1..=3 {
        let started = Instant::now();
        let msg = transient(sleeper.reconcile(&request("default", "sleepy"), &cache));
        let took = started.elapsed();
        eprintln!("sleeping guest attempt {attempt} failed after {took:?}: {msg}");
        assert!(msg.contains("plugin hostile timed out") && msg.contains("200ms limit"), "{msg}");
        assert!(took >= timeout && took < timeout + Duration::from_millis(50), "attempt {attempt} took {took:?}, deadline ± 50 ms");
    }
    assert_eq!(sleeper.stats().timeouts, 3);
    // The same plugin answers the next call normally.
    let calm = cache_of(vec![config_map("default", "calm", json!({"sleepMs": "1"}))]);
    assert!(sleeper.reconcile(&request("default", "calm"), &calm).expect("a short sleep is fine").actions.is_empty());
}

/// What the host copies out of the cache for one call is bounded: past the budget, reads fail
/// and the reconcile fails whatever the guest does with the error.
#[test]
fn cache_reads_are_bounded_per_call() {
    let limits = Limits { reads_per_call: Some(ByteSize(64)), ..Limits::default() };
    let reader = load("hostile", limits);
    let cache = cache_of(vec![config_map("default", "big", json!({"padding": "x".repeat(1000)}))]);
    let msg = transient(reader.reconcile(&request("default", "big"), &cache));
    assert!(msg.contains("read more object JSON from the cache than its per-call budget (64) allows"), "{msg}");
    let roomy = load("hostile", Limits::default());
    assert!(roomy.reconcile(&request("default", "big"), &cache).is_ok(), "the default budget is 4 × memory");
}

/// Host resources a guest creates (pollables, streams) are capped per call: past the cap the
/// call traps instead of growing the host's table.
#[test]
fn wasi_resources_are_capped_per_call() {
    let plugin = load("hostile", Limits::default());
    let few = cache_of(vec![config_map("default", "few", json!({"pollables": "100"}))]);
    assert!(plugin.reconcile(&request("default", "few"), &few).is_ok(), "100 pollables are fine");
    let many = cache_of(vec![config_map("default", "many", json!({"pollables": "1000000"}))]);
    let msg = transient(plugin.reconcile(&request("default", "many"), &many));
    assert!(msg.contains("plugin hostile: reconcile failed") && msg.contains("resource table has no free keys"), "{msg}");
    assert_eq!(plugin.stats().traps, 1);
}

#[test]
fn a_plugin_runs_only_under_its_own_name() {
    let err = load_with("echo", Limits::default(), config_map_grants("impostor")).unwrap_err().to_string();
    assert!(err.contains("the plugin calls itself \"echo\" but its manifest (or ConfigMap) names it \"impostor\""), "{err}");
}

#[test]
fn a_memory_bomb_hits_its_limit_and_the_host_keeps_running() {
    let bomb = load("memory-bomb", Limits { memory: ByteSize::mib(16), ..Limits::default() });
    let cache = cache_of(vec![config_map("default", "web", json!({}))]);
    let msg = transient(bomb.reconcile(&request("default", "web"), &cache));
    eprintln!("memory-bomb: {msg}");
    assert!(msg.contains("plugin memory-bomb ran out of memory") && msg.contains("16Mi limit"), "{msg}");
    let stats = bomb.stats();
    assert_eq!((stats.ooms, stats.traps, stats.timeouts), (1, 0, 0));
    assert_echo_works();
}

#[test]
fn a_panic_traps_the_instance_is_discarded_and_the_next_call_works() {
    let plugin = load("panic", Limits::default());
    let cache = cache_of(vec![config_map("default", "panic-now", json!({})), config_map("default", "calm", json!({}))]);
    let msg = transient(plugin.reconcile(&request("default", "panic-now"), &cache));
    eprintln!("panic: {msg}");
    assert!(msg.contains("plugin panic trapped in reconcile"), "{msg}");
    assert!(msg.contains("deliberate panic while reconciling panic-now"), "the guest's panic message is quoted: {msg}");
    let next = plugin.reconcile(&request("default", "calm"), &cache).expect("the next reconcile works");
    assert!(next.actions.is_empty());
    let stats = plugin.stats();
    assert_eq!((stats.calls, stats.traps, stats.ok), (2, 1, 1));
    assert_echo_works();
}

/// Plugins are linked with a 128 KiB shadow stack (`.cargo/config.toml`): running out of it is
/// a trap like any other, never a write into the plugin's static data or heap.
#[test]
fn a_shadow_stack_overflow_traps_and_the_next_call_works() {
    let plugin = load("panic", Limits::default());
    let cache = cache_of(vec![config_map("default", "deep", json!({})), config_map("default", "calm", json!({}))]);
    let msg = transient(plugin.reconcile(&request("default", "deep"), &cache));
    eprintln!("shadow stack overflow: {msg}");
    assert!(msg.contains("trapped in reconcile"), "{msg}");
    assert!(msg.contains("out of bounds"), "the overflow leaves the memory: {msg}");
    let next = plugin.reconcile(&request("default", "calm"), &cache).expect("the next reconcile works");
    assert!(next.actions.is_empty());
    assert_eq!(plugin.stats().traps, 1);
}

/// The check below, in a process of its own: tracing's per-callsite interest is global, and
/// other tests of this binary hitting the same callsites on their threads at the same moment
/// (with no subscriber) made events of this test's scoped subscriber go missing now and then.
#[test]
fn guest_output_goes_to_the_log_tagged_with_plugin_and_key() {
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe)
        .args(["--exact", "guest_output_in_a_process_of_its_own", "--test-threads=1", "--nocapture"])
        .env(GUEST_OUTPUT_CHILD, "1")
        .output()
        .expect("runs the test binary");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("1 passed"), "{text}");
}

/// Set for the child process of [`guest_output_goes_to_the_log_tagged_with_plugin_and_key`].
const GUEST_OUTPUT_CHILD: &str = "WASMLOOP_GUEST_OUTPUT_CHILD";

#[test]
fn guest_output_in_a_process_of_its_own() {
    if std::env::var_os(GUEST_OUTPUT_CHILD).is_none() {
        return; // run by guest_output_goes_to_the_log_tagged_with_plugin_and_key, in a process of its own
    }
    #[derive(Clone, Default)]
    struct Buffer(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber =
        tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).with_max_level(tracing::Level::INFO).finish();
    let echo = load("echo", Limits::default());
    let probe = load("sandbox-probe", Limits::default());
    let cache = cache_of(vec![config_map("default", "web", json!({}))]);
    tracing::subscriber::with_default(subscriber, || {
        echo.reconcile(&request("default", "web"), &cache).unwrap();
        probe.reconcile(&request("default", "web"), &cache).unwrap();
    });
    let log = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    let line = |needle: &str| log.lines().find(|l| l.contains(needle)).unwrap_or_else(|| panic!("no {needle:?} in:\n{log}")).to_owned();
    let logged = line("echo: web is");
    assert!(logged.contains("plugin=\"echo\"") && logged.contains("key=\"v1/ConfigMap/default/web\""), "{logged}");
    let stdout = line("echo: stdout works");
    assert!(stdout.contains("stream=\"stdout\"") && stdout.contains("plugin=\"echo\""), "{stdout}");
    let stderr = line("sandbox-probe: stderr line");
    assert!(stderr.contains("stream=\"stderr\"") && stderr.contains("plugin=\"sandbox-probe\""), "{stderr}");
}

#[test]
fn invalid_actions_are_refused_naming_the_action() {
    let plugin = load("bad-action", Limits::default());
    let cache = cache_of(vec![]);
    let msg = permanent(plugin.reconcile(&request("default", "invalid-json"), &cache));
    assert!(msg.starts_with("plugin bad-action returned an invalid outcome: action 1 (create): invalid JSON"), "{msg}");
    let msg = permanent(plugin.reconcile(&request("default", "no-name"), &cache));
    assert!(msg.ends_with("action 0 (apply): the object has no metadata.name"), "{msg}");
    let msg = permanent(plugin.reconcile(&request("default", "other"), &cache));
    assert!(msg.ends_with("action 0 (create): expected a JSON object, got an array"), "{msg}");
    assert_eq!(plugin.stats().invalid_outcomes, 3);
}

#[test]
fn reads_outside_the_grants_are_refused_inside_the_guest() {
    let g = grants("read-outside-grant", "grants:\n  - kinds: [v1/ConfigMap]\n    verbs: [read, event]\n    namespaces: [shop]\n");
    let plugin = load_with("read-outside-grant", Limits::default(), g).unwrap();
    // The cache does hold the Secret and the other namespace: only the grants stand in the way.
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"namespace": "shop", "name": "admin-token"}});
    let cache = cache_of(vec![config_map("shop", "probe", json!({})), config_map("kube-system", "cluster-config", json!({})), secret]);
    let outcome = plugin.reconcile(&request("shop", "probe"), &cache).unwrap();
    let Some(Action::Event(Event { message, reason, .. })) = outcome.actions.first().map(Planned::action) else {
        panic!("expected an event, got {:?}", outcome.actions)
    };
    assert_eq!(reason, "ReadOutsideGrant");
    let seen: Value = serde_json::from_str(message).unwrap();
    let secret = seen["secret"].as_str().unwrap();
    assert!(secret.starts_with("not-granted:") && secret.contains("may not read v1/Secret"), "{secret}");
    let other = seen["otherNamespace"].as_str().unwrap();
    assert!(other.starts_with("not-granted:") && other.contains("kube-system"), "{other}");
    assert_eq!(seen["listedAll"], "listed: 1", "a cluster-wide list is filtered to the granted namespace");
}

#[test]
fn writes_outside_the_grants_are_rejected_before_anything_is_sent() {
    let plugin = load("write-outside-grant", Limits::default());
    let cache = cache_of(vec![config_map("default", "web", json!({}))]);
    let outcome = plugin.reconcile(&request("default", "web"), &cache).unwrap();
    assert_eq!(outcome.actions.len(), 2);
    // Admission as the host runs it, without a cluster (built-in scopes).
    let admission = wasmloop::admission::Admission::offline();
    let ctx =
        wasmloop::admission::Context { grants: plugin.grants(), cache: cache.as_ref(), client: None, manager: plugin.name(), budget: None };
    let first = futures::executor::block_on(admission.admit(ctx, outcome.actions[..1].to_vec()));
    assert!(first.is_ok(), "update-status of its own kind is granted: {:?}", first.err());
    let err = futures::executor::block_on(admission.admit(ctx, outcome.actions)).unwrap_err().to_string();
    assert_eq!(
        err,
        "action 1 (delete v1/Secret/kube-system/admin-token) refused, no action of this reconcile was executed: \
         plugin write-outside-grant may not delete v1/Secret admin-token in namespace kube-system: no grant covers kind v1/Secret"
    );
}

#[test]
fn a_plugin_for_another_contract_version_is_refused_at_load() {
    let err = load_with("wrong-version", Limits::default(), Grants::all()).unwrap_err().to_string();
    assert!(err.contains("targets wasmloop:controller@0.9.0") && err.contains("this host speaks wasmloop:controller@0.3.1"), "{err}");
}

/// A plugin built against contract 0.3.0 loads and reconciles on this 0.3.1 host: wasmtime
/// links its `@0.3.0` imports to the host's `@0.3.1` instances (semver), and the host takes its
/// contract version from its export name. Made here from a 0.3.1 build of `namespace-config`
/// by renaming its contract names (same length, so the component stays valid): it imports only
/// the 0.3.0 functions it calls, as a 0.3.0 build does.
#[test]
fn a_plugin_built_against_0_3_0_loads_on_a_0_3_1_host() {
    let mut bytes = plugin_bytes("namespace-config");
    let to = b"@0.3.0";
    let mut renamed = 0;
    for iface in ["types", "cache", "log", "plugin"] {
        let name = format!("wasmloop:controller/{iface}@0.3.1");
        let mut at = 0;
        while let Some(i) = bytes[at..].windows(name.len()).position(|w| w == name.as_bytes()) {
            let end = at + i + name.len();
            bytes[end - to.len()..end].copy_from_slice(to);
            at = end;
            renamed += 1;
        }
    }
    assert!(renamed >= 2, "the build names its contract ({renamed} names renamed)");
    let info = inspect(engine(), &bytes).unwrap();
    assert_eq!((info.wit_package_version.as_deref(), info.compatible), (Some("0.3.0"), true), "{info}");
    assert!(info.imports.iter().all(|i| !i.contains("@0.3.1")), "{:?}", info.imports);

    let compiled = shared_cache().load_or_compile(engine(), &bytes).expect("compiles");
    let grants = grants("namespace-config", "grants:\n  - kinds: [v1/Namespace, v1/ConfigMap]\n    verbs: [read, apply, delete, event]\n");
    let plugin = WasmPlugin::from_compiled(engine(), compiled, Limits::default(), grants).expect("a 0.3.0 plugin loads");
    // An unlabelled Namespace that still has the plugin's ConfigMap: it deletes it (and says so).
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop", "uid": "u-shop"}});
    let key = ObjectKey::new(KindRef::new("v1", "Namespace"), None, "shop");
    let outcome = plugin.reconcile(&Request::new(key), &cache_of(vec![namespace, config_map("shop", "wasmloop-config", json!({}))]));
    let outcome = outcome.expect("it reconciles");
    assert_eq!(outcome.actions.len(), 2, "a delete and an Event: {outcome:?}");
}

#[test]
fn core_modules_and_non_wasm_are_refused_clearly() {
    let err = WasmPlugin::load(engine(), b"\0asm\x01\0\0\0", Limits::default(), Grants::all()).unwrap_err();
    assert!(err.to_string().contains("core WebAssembly module, not a component"), "{err}");
    let err = WasmPlugin::load(engine(), b"#!/bin/sh\necho hi\n", Limits::default(), Grants::all()).unwrap_err();
    assert!(err.to_string().contains("not a WebAssembly binary"), "{err}");
}

#[test]
fn a_plugin_is_not_started_without_read_grants_for_what_it_declares() {
    let g = grants("echo", "grants:\n  - kinds: [v1/Secret]\n    verbs: ['*']\n");
    let err = load_with("echo", Limits::default(), g).unwrap_err().to_string();
    assert!(err.contains("plugin echo declares reading v1/ConfigMap (reconciles) but has no read grant"), "{err}");
    let err = load_with("echo", Limits { memory: ByteSize::mib(64 * 1024), ..Limits::default() }, Grants::all()).unwrap_err().to_string();
    assert!(err.contains("larger than the host's per-plugin maximum"), "{err}");
}

#[test]
fn plugins_have_zero_capabilities() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let plugin = load("sandbox-probe", Limits::default());
    let cache = cache_of(vec![config_map("default", "probe", json!({"port": port.to_string()}))]);
    let outcome = plugin.reconcile(&request("default", "probe"), &cache).unwrap();
    let seen = status_of(&outcome);
    eprintln!("sandbox-probe saw: {seen}");
    assert_eq!(seen["port"], port, "the probe read the port from its object");
    for probe in ["readDir", "readFile", "writeFile", "tcp", "udp", "dns"] {
        let result = seen[probe].as_str().unwrap_or_default();
        assert!(result.starts_with("error:"), "{probe} must fail in the sandbox, got {result:?}");
    }
    assert_eq!(seen["env"], 0, "no environment variables");
    assert_eq!(seen["args"], 0, "no arguments");
    assert!(matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock), "nothing connected");
}

#[test]
fn the_precompiled_cache_hits_and_survives_corrupt_entries() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("precompiled-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = PrecompiledCache::new(&dir).unwrap();
    let bytes = plugin_bytes("echo");
    let first = cache.load_or_compile(engine(), &bytes).unwrap();
    assert_eq!(first.origin, Origin::Compiled { cache_problem: None });
    let hit = cache.load_or_compile(engine(), &bytes).unwrap();
    assert_eq!(hit.origin, Origin::CacheHit);
    assert_eq!(hit.digest, first.digest);
    eprintln!("echo ({} bytes): compile {:?}, precompiled-cache load {:?}", bytes.len(), first.elapsed, hit.elapsed);
    assert!(hit.elapsed < first.elapsed, "a cache hit ({:?}) beats compiling ({:?})", hit.elapsed, first.elapsed);

    // A component from the cache runs.
    let echo = WasmPlugin::from_compiled(engine(), hit, Limits::default(), config_map_grants("echo")).unwrap();
    let objects = cache_of(vec![config_map("default", "web", json!({}))]);
    assert_eq!(status_of(&echo.reconcile(&request("default", "web"), &objects).unwrap())["callsInThisInstance"], 1);

    // Corrupt entry: detected, recompiled, rewritten.
    let path = cache.path_for(engine(), &bytes);
    let mut data = std::fs::read(&path).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0xff;
    std::fs::write(&path, &data).unwrap();
    let again = cache.load_or_compile(engine(), &bytes).unwrap();
    assert!(matches!(&again.origin, Origin::Compiled { cache_problem: Some(p) } if p.contains("checksum mismatch")), "{:?}", again.origin);
    assert_eq!(cache.load_or_compile(engine(), &bytes).unwrap().origin, Origin::CacheHit, "rewritten");

    // Truncated entry, and an artifact of another engine configuration (valid checksum).
    std::fs::write(&path, &data[..10]).unwrap();
    assert!(matches!(cache.load_or_compile(engine(), &bytes).unwrap().origin, Origin::Compiled { cache_problem: Some(_) }));
    let junk = b"not a wasmtime artifact".to_vec();
    std::fs::write(&path, &junk).unwrap();
    std::fs::write(wasmloop::plugin::engine::checksum_path(&path), sha256(&junk)).unwrap();
    let recompiled = cache.load_or_compile(engine(), &bytes).unwrap();
    assert!(
        matches!(&recompiled.origin, Origin::Compiled { cache_problem: Some(p) } if p.contains("incompatible or invalid")),
        "{:?}",
        recompiled.origin
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn sha256(bytes: &[u8]) -> Vec<u8> {
    // The digest helper returns `sha256:<hex>`; decode it back to bytes.
    let hex = wasmloop::plugin::engine::digest(bytes);
    let hex = hex.trim_start_matches("sha256:");
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn inspect_describes_plugins() {
    let info = inspect(engine(), &plugin_bytes("echo")).unwrap();
    assert_eq!(info.name.as_deref(), Some("echo"));
    assert_eq!(info.wit_package_version.as_deref(), Some("0.2.0"));
    assert!(info.compatible);
    assert!(info.exports.iter().any(|e| e == "wasmloop:controller/plugin@0.2.0: metadata, reconcile"), "{:?}", info.exports);
    assert!(info.imports.iter().any(|i| i.starts_with("wasmloop:controller/cache@0.2.0")), "{:?}", info.imports);
    let text = info.to_string();
    assert!(text.contains("plugin:     echo 0.1.0") && text.contains("reconciles: v1/ConfigMap"), "{text}");

    let info = inspect(engine(), &plugin_bytes("wrong-version")).unwrap();
    assert!(!info.compatible);
    assert_eq!(info.wit_package_version.as_deref(), Some("0.9.0"));
    assert!(info.metadata_error.as_deref().unwrap_or_default().contains("wasmloop:controller@0.9.0"), "{info:?}");
    assert!(info.to_string().contains("NOT compatible"), "{info}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_runs_on_a_blocking_thread_of_the_runtime() {
    // The controller's path: spawn_blocking inside the Tokio runtime (WASI's sync adapters
    // block on the runtime there).
    let echo = tokio::task::spawn_blocking(|| load("echo", Limits::default())).await.unwrap();
    let cache = cache_of(vec![config_map("default", "web", json!({}))]);
    let outcome = tokio::task::spawn_blocking(move || echo.reconcile(&request("default", "web"), &cache))
        .await
        .expect("no panic")
        .expect("echo reconciles");
    assert_eq!(status_of(&outcome)["callsInThisInstance"], 1);
}

#[tokio::test]
async fn misuse_on_an_async_thread_is_an_error_not_a_crash() {
    let echo = tokio::task::spawn_blocking(|| load("echo", Limits::default())).await.unwrap();
    let cache = cache_of(vec![config_map("default", "web", json!({}))]);
    // Called on the runtime's own thread: the guest's println! makes WASI block on the runtime,
    // which panics inside the host; the plugin turns that into an error.
    let msg = transient(echo.reconcile(&request("default", "web"), &cache));
    assert!(msg.contains("the host panicked while running reconcile"), "{msg}");
    assert_eq!(echo.stats().host_panics, 1);
}

#[test]
fn concurrent_reconciles_share_one_plugin() {
    let echo = Arc::new(load("echo", Limits::default()));
    let cache = Arc::new(cache_of(vec![config_map("default", "web", json!({}))]));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (echo, cache) = (echo.clone(), cache.clone());
            std::thread::spawn(move || {
                for _ in 0..25 {
                    let outcome = echo.reconcile(&request("default", "web"), cache.as_ref()).unwrap();
                    assert_eq!(status_of(&outcome)["callsInThisInstance"], 1);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("no reconcile thread panicked");
    }
    assert_eq!((echo.stats().calls, echo.stats().ok), (100, 100));
}
