//! The harness talks to a real kube-apiserver: create, watch, and a 409 on a duplicate create;
//! the executor's patches and preconditions as that server answers them; the clients that write
//! for plugins share one HTTP/2 connection.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::runtime::watcher::{self, watcher};
use wasmloop_tests::{TestNamespace, client, init_tracing, kubeconfig};

/// Tests that count this process's connections run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn config_map(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "data": {"value": value}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_watch_and_conflict_against_a_real_apiserver() -> anyhow::Result<()> {
    init_tracing();
    let _serial = SERIAL.lock().await;
    let (client, _) = client().await?;
    let ns = TestNamespace::create(&client, "harness").await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);

    // A watch started before the object exists sees it arrive.
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    api.create(&PostParams::default(), &config_map("first", "1")).await?;
    let seen = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(ev) = events.next().await {
            if let watcher::Event::Apply(cm) | watcher::Event::InitApply(cm) = ev?
                && cm.metadata.name.as_deref() == Some("first")
            {
                return anyhow::Ok(cm);
            }
        }
        anyhow::bail!("watch ended")
    })
    .await??;
    assert_eq!(seen.data.unwrap().get("value").map(String::as_str), Some("1"));

    // A duplicate create is a 409 AlreadyExists, decoded as such (not a broken connection).
    let err = api.create(&PostParams::default(), &config_map("first", "2")).await.unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 409, "{s:?}");
            assert!(s.is_already_exists(), "{s:?}");
        }
        other => panic!("expected an API error, got {other}"),
    }
    ns.cleanup().await
}

/// The executor's patches and preconditions as the real API server answers them: a stale
/// resourceVersion or uid, and a failed JSON-patch `test`, are conflicts (not errors), for merge
/// and JSON patches, status patches and deletes alike; matching preconditions write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patches_and_deletes_honour_preconditions_and_report_conflicts() -> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    use serde_json::json;
    use wasmloop::actions::{Action, Deletion, Patch, PatchType, Preconditions};
    use wasmloop::executor::Executor;
    use wasmloop::kinds::{KindRef, KindResolver, ObjectKey};
    use wasmloop_tests::admit_and_execute;

    init_tracing();
    let (client, _) = client().await?;
    let ns = TestNamespace::create(&client, "patch").await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let cm = api.create(&PostParams::default(), &config_map("target", "1")).await?;
    let (uid, rv) = (cm.metadata.uid.clone().unwrap(), cm.metadata.resource_version.clone().unwrap());
    let executor = Executor::new(KindResolver::new(client.clone()), None);
    let key = ObjectKey::new(KindRef::new("v1", "ConfigMap"), Some(&ns.name), "target");
    let pre = |uid: Option<&str>, rv: Option<&str>| Preconditions { uid: uid.map(str::to_owned), resource_version: rv.map(str::to_owned) };
    let patch = |patch_type, body: serde_json::Value, preconditions| {
        Action::Patch(Patch { key: key.clone(), status: false, patch_type, body, preconditions })
    };
    let value = || async { api.get("target").await.map(|c| c.data.unwrap_or_default().get("value").cloned().unwrap_or_default()) };

    // Matching preconditions: written.
    let merge = patch(PatchType::Merge, json!({"data": {"value": "2"}}), pre(Some(&uid), Some(&rv)));
    admit_and_execute(&executor, "test", merge).await?;
    assert_eq!(value().await?, "2");

    // A stale resourceVersion (merge), a wrong uid (merge), a stale one in a JSON patch: conflicts.
    for (what, action) in [
        ("merge, stale resourceVersion", patch(PatchType::Merge, json!({"data": {"value": "x"}}), pre(None, Some(&rv)))),
        ("merge, other uid", patch(PatchType::Merge, json!({"data": {"value": "x"}}), pre(Some("not-the-uid"), None))),
        (
            "json, stale resourceVersion",
            patch(PatchType::Json, json!([{"op": "replace", "path": "/data/value", "value": "x"}]), pre(None, Some(&rv))),
        ),
        (
            "json, failed test",
            patch(
                PatchType::Json,
                json!([{"op": "test", "path": "/data/value", "value": "1"}, {"op": "replace", "path": "/data/value", "value": "x"}]),
                pre(None, None),
            ),
        ),
        ("delete, other uid", Action::Delete(Deletion { key: key.clone(), preconditions: pre(Some("not-the-uid"), None) })),
    ] {
        let err = admit_and_execute(&executor, "test", action).await.expect_err(what);
        assert!(err.is_conflict(), "{what}: expected a conflict, got {err}");
        assert!(!err.is_permanent(), "{what}");
        assert_eq!(value().await?, "2", "{what}: nothing was written");
    }

    // A patch the server finds invalid is the plugin's error, permanent, not a conflict.
    let invalid = patch(PatchType::Json, json!([{"op": "add", "path": "/metadata/labels", "value": {"bad key!": "x"}}]), pre(None, None));
    let err = admit_and_execute(&executor, "test", invalid).await.expect_err("an invalid label");
    assert!(err.is_permanent() && !err.is_conflict(), "{err}");

    // JSON patch with a matching uid test, then a delete with the right uid.
    let json_ok = patch(PatchType::Json, json!([{"op": "replace", "path": "/data/value", "value": "3"}]), pre(Some(&uid), None));
    admit_and_execute(&executor, "test", json_ok).await?;
    assert_eq!(value().await?, "3");
    admit_and_execute(&executor, "test", Action::Delete(Deletion { key: key.clone(), preconditions: pre(Some(&uid), None) })).await?;
    assert!(api.get_opt("target").await?.is_none());
    ns.cleanup().await
}

/// The established TCP connections this process holds to `port`, by socket inode (its sockets
/// in /proc/self/net/tcp{,6}): compared as sets, so a connection an earlier test left closing
/// meanwhile is not counted against the ones opened since.
fn connections_to(port: u16) -> anyhow::Result<std::collections::HashSet<String>> {
    let mut ours = std::collections::HashSet::new();
    for fd in std::fs::read_dir("/proc/self/fd")? {
        let link = std::fs::read_link(fd?.path()).unwrap_or_default();
        if let Some(inode) = link.to_str().and_then(|l| l.strip_prefix("socket:[")).and_then(|l| l.strip_suffix(']')) {
            ours.insert(inode.to_owned());
        }
    }
    let mut established = std::collections::HashSet::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        for line in std::fs::read_to_string(table)?.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let remote_port = f.get(2).and_then(|a| a.rsplit(':').next()).and_then(|p| u16::from_str_radix(p, 16).ok());
            // State 01: established.
            if let Some(inode) = f.get(9).filter(|i| ours.contains(**i))
                && remote_port == Some(port)
                && f.get(3) == Some(&"01")
            {
                established.insert((*inode).to_owned());
            }
        }
    }
    Ok(established)
}

/// The clients the host writes for plugins with (each impersonating its plugin) send a burst of
/// requests over one connection (HTTP/2, negotiated with the API server), not one connection each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_clients_share_one_http2_connection() -> anyhow::Result<()> {
    init_tracing();
    let _serial = SERIAL.lock().await;
    let kc = kubeconfig()?;
    let kc = kc.to_str().expect("a UTF-8 path");
    let server: String = std::fs::read_to_string(kc)?
        .lines()
        .find_map(|l| l.trim().strip_prefix("server:").map(|s| s.trim().to_owned()))
        .expect("a server URL in the kubeconfig");
    let port: u16 = server.rsplit(':').next().and_then(|p| p.trim_end_matches('/').parse().ok()).expect("a port");

    let before = connections_to(port)?;
    let connection = wasmloop::client::Connection::new(Some(kc)).await?;
    let clients = [
        connection.impersonating("system:serviceaccount:default:plugin-a")?,
        connection.impersonating("system:serviceaccount:default:plugin-b")?,
        connection.impersonating("system:serviceaccount:default:plugin-c")?,
    ];
    // 60 requests in flight at once: over HTTP/1.1 each would need a connection of its own.
    let answers = futures::future::join_all((0..60).map(|i| {
        let client = clients[i % clients.len()].clone();
        async move { client.apiserver_version().await }
    }))
    .await;
    for a in answers {
        a?;
    }
    assert_eq!(connection.requests().responses(200), 60);
    let opened = connections_to(port)?.difference(&before).count();
    assert_eq!(opened, 1, "60 concurrent requests from 3 identities opened {opened} connections");

    // Each identity still reaches the API server as itself.
    let forbidden = Api::<ConfigMap>::namespaced(clients[0].clone(), "default").list(&Default::default()).await.unwrap_err();
    match forbidden {
        kube::Error::Api(s) => assert!(s.code == 403 && s.message.contains("plugin-a"), "{s:?}"),
        other => panic!("expected a 403 for plugin-a, got {other}"),
    }
    Ok(())
}
