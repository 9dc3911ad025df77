//! The harness talks to a real kube-apiserver: create, watch, and a 409 on a duplicate create.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::runtime::watcher::{self, watcher};
use wasmloop_tests::{TestNamespace, client, init_tracing};

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
    let (client, _) = client().await?;
    let ns = TestNamespace::create(&client, "harness").await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);

    // A watch started before the object exists sees it arrive.
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    api.create(&PostParams::default(), &config_map("first", "1")).await?;
    let seen = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(ev) = events.next().await {
            if let watcher::Event::Apply(cm) | watcher::Event::InitApply(cm) = ev? {
                if cm.metadata.name.as_deref() == Some("first") {
                    return anyhow::Ok(cm);
                }
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
