//! The executor's unit tests: what it sends and how it reads the answers, against a scripted
//! API server ([`crate::fake_api`]), with no cluster.

use super::*;

#[test]
fn permanent_errors_are_told_apart() {
    let invalid = Error::InvalidObject { verb: Verb::Create, object: "x".into(), reason: "r".into() };
    assert!(invalid.is_permanent());
    let status = kube::core::Status::failure("bad", "Invalid").with_code(422);
    let api = Error::Api { verb: Verb::Create, object: "x".into(), source: kube::Error::Api(status.boxed()) };
    assert!(api.is_permanent());
    let status = kube::core::Status::failure("busy", "TooManyRequests").with_code(429);
    assert!(is_retryable(&kube::Error::Api(status.clone().boxed())));
    let api = Error::Api { verb: Verb::Create, object: "x".into(), source: kube::Error::Api(status.boxed()) };
    assert!(!api.is_permanent());
    let forbidden = kube::core::Status::failure("no", "Forbidden").with_code(403);
    let api = Error::Api { verb: Verb::Patch, object: "x".into(), source: kube::Error::Api(forbidden.boxed()) };
    assert!(!api.is_permanent(), "RBAC may be granted later: retried with backoff");
}

#[test]
fn preconditions_fold_into_patches() {
    let pre = Preconditions { uid: Some("u".into()), resource_version: Some("7".into()) };
    let KubePatch::Merge(merge) = with_preconditions(PatchDoc::Merge(&json!({"data": {"a": "b"}})), &pre) else { panic!() };
    assert_eq!(merge, json!({"data": {"a": "b"}, "metadata": {"uid": "u", "resourceVersion": "7"}}));
    let ops: json_patch::Patch = serde_json::from_value(json!([{"op": "remove", "path": "/data/a"}])).unwrap();
    let KubePatch::Json(ops) = with_preconditions(PatchDoc::Json(&ops), &pre) else { panic!() };
    assert_eq!(serde_json::to_value(&ops).unwrap()[1], json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"}));
    assert_eq!(serde_json::to_value(&ops).unwrap()[2], json!({"op": "remove", "path": "/data/a"}));
}

#[test]
fn truncate_respects_char_boundaries() {
    assert_eq!(truncate("héllo", 2), "h");
    assert_eq!(truncate("abc", 10), "abc");
}

mod against_a_scripted_server {
    use kube::discovery::ApiResource;
    use serde_json::{Value, json};

    use super::super::*;
    use crate::actions::Planned;
    use crate::actions::{Deletion, Patch, PatchType};
    use crate::fake_api::{self, Sent, status};
    use crate::kinds::KindRef;

    fn config_map_kind() -> ResolvedKind {
        let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        ResolvedKind { kind: KindRef::new("v1", "ConfigMap"), resource, namespaced: true }
    }

    fn admitted(action: Action) -> AdmittedAction {
        AdmittedAction::unchecked(Planned::new(action).expect("a valid action"), Some(config_map_kind()))
    }

    fn key(name: &str) -> ObjectKey {
        KindRef::new("v1", "ConfigMap").key(Some("ns"), name)
    }

    fn config_map(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "ns"}, "data": {"a": "1"}})
    }

    /// An executor on a server answering with `answer`, and what it was sent.
    fn executor(answer: impl Fn(&Sent) -> (u16, Value) + Send + Sync + 'static) -> (Executor, fake_api::Log) {
        let (client, log) = fake_api::client(answer);
        (Executor::new(KindResolver::new(client), None), log)
    }

    fn sent(log: &fake_api::Log) -> Vec<(String, String)> {
        log.lock().iter().map(|s| (s.method.clone(), s.path.clone())).collect()
    }

    #[tokio::test]
    async fn a_create_sends_the_object_once_and_an_existing_one_counts_as_done() {
        let (exec, log) =
            executor(|s| if s.body["metadata"]["name"] == "old" { status(409, "AlreadyExists", "exists") } else { (201, s.body.clone()) });
        let done = exec.execute("m", &admitted(Action::Create(config_map("new"))), &Fence::open()).await.unwrap();
        assert_eq!(done, Executed::Object(config_map("new")));
        assert_eq!(log.lock()[0].body, config_map("new"), "the object as the plugin returned it");
        let old = exec.execute("m", &admitted(Action::Create(config_map("old"))), &Fence::open()).await.unwrap();
        assert_eq!(old, Executed::AlreadyDone);
        assert_eq!(sent(&log), vec![("POST".into(), "/api/v1/namespaces/ns/configmaps".into()); 2], "AlreadyExists is not retried");
    }

    #[tokio::test]
    async fn a_delete_of_a_missing_object_is_done_and_a_failed_precondition_is_a_conflict_sent_once() {
        let (exec, log) = executor(|s| match s.path.rsplit('/').next() {
            Some("gone") => status(404, "NotFound", "not found"),
            _ if s.body["preconditions"]["uid"] == "u1" => status(409, "Conflict", "Precondition failed: UID in precondition: u1"),
            _ => (200, json!({"kind": "Status", "status": "Success"})),
        });
        assert_eq!(exec.execute("m", &admitted(Action::delete(key("gone"))), &Fence::open()).await.unwrap(), Executed::AlreadyDone);
        let guarded =
            Action::Delete(Deletion { key: key("c"), preconditions: Preconditions { uid: Some("u1".into()), resource_version: None } });
        let err = exec.execute("m", &admitted(guarded), &Fence::open()).await.unwrap_err();
        assert!(err.is_conflict(), "{err}");
        assert_eq!(log.lock().len(), 2, "a failed precondition is not retried: the plugin reconciles again");
        assert_eq!(log.lock()[1].body["propagationPolicy"], "Background");
    }

    #[tokio::test(start_paused = true)]
    async fn server_errors_are_retried_and_permanent_ones_are_not() {
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let (exec, log) = executor(move |s| {
            if s.body["metadata"]["name"] == "bad" {
                return status(422, "Invalid", "data: Invalid value");
            }
            match calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                0 | 1 => status(503, "ServiceUnavailable", "etcd is restarting"),
                _ => (200, s.body.clone()),
            }
        });
        let update = admitted(Action::UpdateStatus { key: key("c"), status: json!({"ready": true}) });
        assert!(matches!(exec.execute("m", &update, &Fence::open()).await.unwrap(), Executed::Object(_)));
        let sent_status: Vec<_> = log.lock().iter().map(|s| (s.path.clone(), s.content_type.clone(), s.body.clone())).collect();
        assert_eq!(sent_status.len(), 3, "two 503s, then the write");
        let expected = (
            "/api/v1/namespaces/ns/configmaps/c/status".to_string(),
            "application/merge-patch+json".to_string(),
            json!({"status": {"ready": true}}),
        );
        assert_eq!(sent_status[2], expected);
        let err = exec.execute("m", &admitted(Action::Create(config_map("bad"))), &Fence::open()).await.unwrap_err();
        assert!(err.is_permanent(), "{err}");
        assert_eq!(log.lock().len(), 4, "a 422 is sent once");
    }

    #[tokio::test]
    async fn patch_preconditions_go_into_the_document_and_a_closed_fence_sends_nothing() {
        let (exec, log) = executor(|s| (200, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "echo": s.body})));
        let pre = Preconditions { uid: Some("u".into()), resource_version: Some("7".into()) };
        let json_patch = Action::Patch(Patch {
            key: key("c"),
            status: false,
            patch_type: PatchType::Json,
            body: json!([{"op": "remove", "path": "/data/a"}]),
            preconditions: pre.clone(),
        });
        exec.execute("m", &admitted(json_patch), &Fence::open()).await.unwrap();
        let merge = Action::Patch(Patch {
            key: key("c"),
            status: false,
            patch_type: PatchType::Merge,
            body: json!({"data": {"b": "2"}}),
            preconditions: pre,
        });
        exec.execute("m", &admitted(merge.clone()), &Fence::open()).await.unwrap();
        {
            let log = log.lock();
            assert_eq!(log[0].content_type, "application/json-patch+json");
            assert_eq!(
                log[0].body,
                json!([
                    {"op": "test", "path": "/metadata/uid", "value": "u"},
                    {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
                    {"op": "remove", "path": "/data/a"}
                ])
            );
            assert_eq!(log[1].body, json!({"data": {"b": "2"}, "metadata": {"uid": "u", "resourceVersion": "7"}}));
        }
        let err = exec.execute("m", &admitted(merge), &Fence::closed()).await.unwrap_err();
        assert!(err.is_fenced(), "{err}");
        assert_eq!(log.lock().len(), 2, "nothing is sent while the fence is closed");
    }

    #[tokio::test]
    async fn an_apply_is_forced_with_the_managers_name() {
        let (exec, log) = executor(|s| (200, s.body.clone()));
        exec.execute("podset", &admitted(Action::Apply(config_map("c"))), &Fence::open()).await.unwrap();
        let log = log.lock();
        assert_eq!((log[0].method.as_str(), log[0].content_type.as_str()), ("PATCH", "application/apply-patch+yaml"));
        assert_eq!(log[0].body, config_map("c"));
    }
}
