//! Fuzz harnesses of what a plugin returns: [`to_outcome`] (a component's outcome record and its
//! JSON documents), [`from_sdk_outcome`] (a natively run plugin's), the contract 0.1 outcome
//! through [`super::super::compat::v0_1::outcome`], and [`spec_from_metadata`], run by
//! [`crate::fuzz::run`].

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::actions::MAX_PATCH_PATH_SEGMENTS;
use crate::plugin::bindings::v0_1::types as old;
use crate::plugin::compat;

/// JSON without floats (a float's text may not read back to the same bits, which would make
/// the WIT and SDK forms of one document differ for a reason that is not the conversion's).
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(&["", "p", "v1", "Pod", "/metadata/name", "add"][..]).prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        let key = prop_oneof![
            3 => prop::sample::select(&["apiVersion", "kind", "metadata", "name", "namespace", "op", "path", "value", "status"][..])
                .prop_map(str::to_owned),
            1 => any::<String>(),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key, inner), 0..4).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn pick(items: &'static [&'static str]) -> impl Strategy<Value = String> + Clone {
    prop::sample::select(items).prop_map(str::to_owned)
}

/// One of `valid` three times in four, else one of `invalid`.
fn mostly(valid: &'static [&'static str], invalid: &'static [&'static str]) -> impl Strategy<Value = String> + Clone {
    prop_oneof![3 => pick(valid), 1 => pick(invalid)]
}

fn api_version() -> impl Strategy<Value = String> + Clone {
    mostly(&["v1", "apps/v1", "wasmloop.dev/v1alpha1"], &["", "../v1", "a/b/v1", "V1"])
}

fn kind() -> impl Strategy<Value = String> + Clone {
    mostly(&["Pod", "ConfigMap", "PodSet"], &["", "PodList", "Pod/status", "pod", "1Pod"])
}

fn namespace() -> impl Strategy<Value = Option<String>> + Clone {
    prop::option::of(mostly(&["ns", "", "kube-system"], &["A", "../kube-system", "-x"]))
}

fn name() -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        8 => mostly(&["p", "web-", "system:x"], &["", "p/status", "..", ".", "a b", "a%2Fb", "a\u{0}b"]),
        1 => Just("x".repeat(254)),
        1 => any::<String>(),
    ]
}

fn key() -> impl Strategy<Value = wit::ObjectKey> + Clone {
    (api_version(), kind(), namespace(), name()).prop_map(|(api_version, kind, namespace, name)| wit::ObjectKey {
        api_version,
        kind,
        namespace,
        name,
    })
}

/// An object body near the rule of [`Target::of_object`], or any JSON.
fn object() -> impl Strategy<Value = Value> {
    let field = |s: BoxedStrategy<String>| prop_oneof![4 => s.prop_map(Value::from), 1 => json()];
    let meta = (
        prop::option::of(field(name().boxed())),
        prop::option::of(field(name().boxed())),
        prop::option::of(field(namespace().prop_map(Option::unwrap_or_default).boxed())),
    )
        .prop_map(|(name, generate, ns)| {
            let mut m = serde_json::Map::new();
            m.extend(name.map(|v| ("name".to_owned(), v)));
            m.extend(generate.map(|v| ("generateName".to_owned(), v)));
            m.extend(ns.map(|v| ("namespace".to_owned(), v)));
            Value::Object(m)
        });
    prop_oneof![
        4 => (field(api_version().boxed()), field(kind().boxed()), prop_oneof![4 => meta, 1 => json()], json())
            .prop_map(|(a, k, m, extra)| json!({"apiVersion": a, "kind": k, "metadata": m, "spec": extra})),
        1 => json(),
    ]
}

/// A JSON patch: operations of every name, with and without a path and a value.
fn json_patch() -> impl Strategy<Value = Value> {
    let op = (
        prop::option::of(pick(&["add", "remove", "replace", "test", "copy", "move", ""])),
        prop::option::of(prop_oneof![
            4 => pick(&["/metadata/ownerReferences/0", "/a/-", "", "/a~1b/~0"]).prop_map(Value::from),
            1 => (120usize..136).prop_map(|n| Value::from("/a".repeat(n))),
            1 => json(),
        ]),
        prop::option::of(json()),
    )
        .prop_map(|(op, path, value)| {
            let mut m = serde_json::Map::new();
            m.extend(op.map(|o| ("op".to_owned(), Value::from(o))));
            m.extend(path.map(|p| ("path".to_owned(), p)));
            m.extend(value.map(|v| ("value".to_owned(), v)));
            Value::Object(m)
        });
    prop_oneof![4 => prop::collection::vec(op, 0..4).prop_map(Value::Array), 1 => json()]
}

/// A document's text: the document, or text that is not quite JSON.
fn text(doc: impl Strategy<Value = Value>) -> impl Strategy<Value = String> {
    (doc, 0u8..8, any::<prop::sample::Index>()).prop_map(|(v, damage, at)| {
        let mut s = v.to_string();
        match damage {
            0 => s.truncate(s.floor_char_boundary(at.index(s.len() + 1))),
            1 => s.push('}'),
            _ => {}
        }
        s
    })
}

fn preconditions() -> impl Strategy<Value = wit::Preconditions> {
    let field = || prop::option::of(pick(&["", "u", "12"]));
    (field(), field()).prop_map(|(uid, resource_version)| wit::Preconditions { uid, resource_version })
}

/// A component's action: every variant, near-valid mostly.
fn wit_action() -> impl Strategy<Value = wit::Action> {
    let event_type = prop_oneof![Just(wit::EventType::Normal), Just(wit::EventType::Warning)];
    let patch_type = prop_oneof![Just(wit::PatchType::Merge), Just(wit::PatchType::Json)];
    prop_oneof![
        text(object()).prop_map(wit::Action::Create),
        text(object()).prop_map(wit::Action::Apply),
        (key(), preconditions()).prop_map(|(key, preconditions)| wit::Action::Delete(wit::Deletion { key, preconditions })),
        (key(), any::<bool>(), patch_type, text(prop_oneof![json_patch(), json()]), preconditions()).prop_map(
            |(key, status, patch_type, body, preconditions)| wit::Action::Patch(wit::Patch {
                key,
                status,
                patch_type,
                body,
                preconditions
            })
        ),
        (key(), text(json())).prop_map(|(key, status)| wit::Action::UpdateStatus(wit::StatusUpdate { key, status })),
        (key(), event_type, pick(&["", "Boom"]), any::<String>()).prop_map(|(regarding, event_type, reason, message)| {
            wit::Action::Event(wit::Event { regarding, event_type, reason, message })
        }),
    ]
}

/// What every converted outcome holds: each action's target is valid, and what it writes can be
/// derived (admission reads it) without panicking.
fn check_outcome(o: &Outcome, max_actions: usize) -> Result<(), TestCaseError> {
    prop_assert!(o.actions.len() <= max_actions);
    for planned in &o.actions {
        let a = planned.action();
        prop_assert!(Planned::new(a.clone()).is_ok_and(|again| again == *planned), "{a:?}");
        match a {
            Action::Create(object) | Action::Apply(object) => prop_assert!(object.is_object(), "{a:?}"),
            Action::Patch(Patch { patch_type: PatchType::Json, body, .. }) => {
                prop_assert!(crate::admission::result::json_patch_written(body).is_object());
            }
            _ => {}
        }
    }
    Ok(())
}

/// A refusal names the bad action (`action <i> (<verb>): …`) or the count.
fn check_refusal(err: &str) -> Result<(), TestCaseError> {
    prop_assert!((err.starts_with("action ") && err.contains("): ")) || err.contains("more than limits.maxActions"), "{err:?}");
    Ok(())
}

/// `to_outcome` on random outcome records: never panics; a refusal names the bad action; an
/// accepted outcome holds [`check_outcome`] and keeps the requeue. The same outcome in contract
/// 0.1 terms (where it can be said: no patches, no delete preconditions) converts through
/// [`compat::v0_1::outcome`] to the same result.
#[test]
fn fuzz_outcome() {
    let outcome = (prop::collection::vec(wit_action(), 0..5), prop::option::of(any::<u64>()), 0u32..6);
    crate::fuzz::run(file!(), "outcome", outcome, |(actions, requeue_after_ms, max_actions)| {
        let limits = Limits { max_actions, ..Limits::default() };
        let as_old = actions.iter().map(to_old).collect::<Option<Vec<_>>>();
        let result = to_outcome(wit::Outcome { actions, requeue_after_ms }, &limits);
        match &result {
            Ok(o) => {
                check_outcome(o, max_actions as usize)?;
                prop_assert_eq!(o.requeue_after, requeue_after_ms.map(Duration::from_millis));
            }
            Err(e) => check_refusal(&e.to_string())?,
        }
        if let Some(actions) = as_old {
            let via_compat = to_outcome(compat::v0_1::outcome(old::Outcome { actions, requeue_after_ms }), &limits);
            prop_assert_eq!(&via_compat, &result);
        }
        Ok(result.is_ok())
    });
}

/// The contract 0.1 form of `a`, if it has one.
fn to_old(a: &wit::Action) -> Option<old::Action> {
    let key = |k: &wit::ObjectKey| old::ObjectKey {
        api_version: k.api_version.clone(),
        kind: k.kind.clone(),
        namespace: k.namespace.clone(),
        name: k.name.clone(),
    };
    Some(match a {
        wit::Action::Create(json) => old::Action::Create(json.clone()),
        wit::Action::Apply(json) => old::Action::Apply(json.clone()),
        wit::Action::Delete(d) if d.preconditions.uid.is_none() && d.preconditions.resource_version.is_none() => {
            old::Action::Delete(key(&d.key))
        }
        wit::Action::UpdateStatus(u) => old::Action::UpdateStatus(old::StatusUpdate { key: key(&u.key), status: u.status.clone() }),
        wit::Action::Event(e) => old::Action::Event(old::Event {
            regarding: key(&e.regarding),
            event_type: match e.event_type {
                wit::EventType::Normal => old::EventType::Normal,
                wit::EventType::Warning => old::EventType::Warning,
            },
            reason: e.reason.clone(),
            message: e.message.clone(),
        }),
        wit::Action::Delete(_) | wit::Action::Patch(_) => return None,
    })
}

fn sdk_key(k: &wit::ObjectKey) -> sdk::ObjectKey {
    sdk::ObjectKey { kind: sdk::KindRef::new(k.api_version.clone(), k.kind.clone()), namespace: k.namespace.clone(), name: k.name.clone() }
}

/// One action in both forms a plugin can give it: the SDK's (native) and the component's.
fn sdk_and_wit_action() -> impl Strategy<Value = (sdk::Action, wit::Action)> {
    let no_pre = || wit::Preconditions { uid: None, resource_version: None };
    prop_oneof![
        object().prop_map(|o| (sdk::Action::Create(o.clone()), wit::Action::Create(o.to_string()))),
        object().prop_map(|o| (sdk::Action::Apply(o.clone()), wit::Action::Apply(o.to_string()))),
        key().prop_map(move |k| (
            sdk::Action::Delete(sdk::Deletion::new(sdk_key(&k))),
            wit::Action::Delete(wit::Deletion { key: k, preconditions: no_pre() })
        )),
        (key(), json()).prop_map(|(k, status)| {
            let wit = wit::Action::UpdateStatus(wit::StatusUpdate { key: k.clone(), status: status.to_string() });
            (sdk::Action::UpdateStatus { key: sdk_key(&k), status }, wit)
        }),
        (key(), any::<bool>(), any::<bool>(), prop_oneof![json_patch(), json()], prop::option::of(pick(&["u", ""]))).prop_map(
            |(k, status, merge, body, uid)| {
                let (sdk_type, wit_type) =
                    if merge { (sdk::PatchType::Merge, wit::PatchType::Merge) } else { (sdk::PatchType::Json, wit::PatchType::Json) };
                let preconditions = sdk::Preconditions { uid: uid.clone(), resource_version: None };
                let sdk = sdk::Patch { key: sdk_key(&k), status, patch_type: sdk_type, body: body.clone(), preconditions };
                let wit_pre = wit::Preconditions { uid, resource_version: None };
                let wit = wit::Patch { key: k, status, patch_type: wit_type, body: body.to_string(), preconditions: wit_pre };
                (sdk::Action::Patch(sdk), wit::Action::Patch(wit))
            }
        ),
        (key(), any::<bool>(), pick(&["", "Boom"]), any::<String>()).prop_map(|(k, warning, reason, message)| {
            let (sdk_type, wit_type) =
                if warning { (sdk::EventType::Warning, wit::EventType::Warning) } else { (sdk::EventType::Normal, wit::EventType::Normal) };
            let sdk = sdk::Event { regarding: sdk_key(&k), event_type: sdk_type, reason: reason.clone(), message: message.clone() };
            (sdk::Action::Event(sdk), wit::Action::Event(wit::Event { regarding: k, event_type: wit_type, reason, message }))
        }),
    ]
}

/// `from_sdk_outcome` (a plugin run natively) accepts and refuses exactly what `to_outcome` does
/// for the same outcome sent by a component, with the same message, and converts it to the same
/// actions; requeues are cut to whole milliseconds.
#[test]
fn fuzz_sdk_outcome_matches_the_components() {
    let outcome = (prop::collection::vec(sdk_and_wit_action(), 0..5), prop::option::of(any::<u64>()), 0u32..6);
    crate::fuzz::run(file!(), "sdk-outcome", outcome, |(pairs, requeue_ms, max_actions)| {
        let limits = Limits { max_actions, ..Limits::default() };
        let (sdk_actions, wit_actions): (Vec<_>, Vec<_>) = pairs.into_iter().unzip();
        let mut sdk_outcome = sdk::Outcome::new();
        for a in sdk_actions {
            sdk_outcome.push(a);
        }
        sdk_outcome.requeue_after = requeue_ms.map(|ms| Duration::from_millis(ms) + Duration::from_micros(999));
        let native = from_sdk_outcome(sdk_outcome, &limits);
        let component = to_outcome(wit::Outcome { actions: wit_actions, requeue_after_ms: requeue_ms }, &limits);
        prop_assert_eq!(&native, &component);
        if let Ok(o) = &native {
            check_outcome(o, max_actions as usize)?;
        }
        Ok(native.is_ok())
    });
}

/// `spec_from_metadata` on random metadata: never panics; an accepted spec has a DNS-label name,
/// a semantic version, valid kinds and at most [`MAX_FIELDS`] fields of kinds it reads.
#[test]
fn fuzz_plugin_metadata() {
    let kind_ref = || (api_version(), kind()).prop_map(|(api_version, kind)| wit::KindRef { api_version, kind });
    let mapping = prop_oneof![
        Just(wit::Mapping::Owner),
        Just(wit::Mapping::SameName),
        Just(wit::Mapping::Namespace),
        any::<String>().prop_map(wit::Mapping::Label),
    ];
    let selector = || prop::option::of(pick(&["app=web", "a in (", ""]));
    let path = || mostly(&["status.phase", "labels.app", "metadata.annotations.a/b"], &["spec..x", "", "labels.", "a[0]"]);
    let watch = (kind_ref(), mapping, selector()).prop_map(|(kind, mapping, selector)| wit::Watch {
        kind,
        mapping,
        selector,
        annotation_selector: None,
    });
    let index = (kind_ref(), mostly(&["by-node"], &[""]), path()).prop_map(|(kind, name, path)| wit::Index { kind, name, path });
    let field = (kind_ref(), path()).prop_map(|(kind, path)| wit::Field { kind, path });
    let metadata = (
        prop_oneof![4 => mostly(&["podset", " podset "], &["Pod Set", "-x", ""]), 1 => any::<String>()],
        prop_oneof![4 => mostly(&["1.0.0", "1.2.3-rc.1+b"], &["1.0", "v1.0.0", ""]), 1 => any::<String>()],
        kind_ref(),
        selector(),
        prop::collection::vec(watch, 0..2),
        prop::collection::vec(index, 0..2),
        prop::collection::vec(field, 0..2),
    )
        .prop_map(|(name, version, reconciles, selector, watches, indexes, fields)| wit::PluginMetadata {
            name,
            version,
            reconciles,
            selector,
            watches,
            indexes,
            fields,
            annotation_selector: None,
        });
    crate::fuzz::run(file!(), "plugin-metadata", metadata, |m| match spec_from_metadata(m) {
        Ok(spec) => {
            prop_assert!(!spec.name.is_empty() && spec.name.len() <= 63);
            prop_assert!(semver::Version::parse(&spec.version).is_ok());
            prop_assert!(spec.fields.len() <= MAX_FIELDS);
            let readable = spec.kinds();
            prop_assert!(spec.fields.iter().all(|f| readable.contains(&f.kind)));
            Ok(true)
        }
        Err(e) => {
            prop_assert!(!e.to_string().is_empty());
            Ok(false)
        }
    });
}

/// A JSON patch operation whose path has `depth` segments.
fn deep_patch(depth: usize) -> wit::Action {
    let path = "/a".repeat(depth);
    let body = json!([{"op": "add", "path": path, "value": 1}, {"op": "add", "path": path, "value": 2}]).to_string();
    wit::Action::Patch(wit::Patch {
        key: wit::ObjectKey { api_version: "v1".into(), kind: "Pod".into(), namespace: Some("ns".into()), name: "p".into() },
        status: false,
        patch_type: wit::PatchType::Json,
        body,
        preconditions: wit::Preconditions { uid: None, resource_version: None },
    })
}

/// Found while writing [`fuzz_outcome`]: a JSON patch path of a million segments made
/// admission build a value nested a million deep (`admission::result::json_patch_written`), and the host aborted
/// on a stack overflow. Paths are limited to [`MAX_PATCH_PATH_SEGMENTS`] segments.
#[test]
fn deep_json_patch_paths_are_refused() {
    let one = |a| to_outcome(wit::Outcome { actions: vec![a], requeue_after_ms: None }, &Limits::default());
    let err = one(deep_patch(1_000_000)).unwrap_err().to_string();
    assert_eq!(err, "action 0 (patch): operation 0: path has more than 128 segments");
    assert!(one(deep_patch(MAX_PATCH_PATH_SEGMENTS + 1)).is_err());
    let o = one(deep_patch(MAX_PATCH_PATH_SEGMENTS)).unwrap();
    let Action::Patch(Patch { body, .. }) = o.actions[0].action() else { panic!("{:?}", o.actions[0]) };
    let written = crate::admission::result::json_patch_written(body);
    assert_eq!(written.pointer(&"/a".repeat(MAX_PATCH_PATH_SEGMENTS)), Some(&json!(2)));
}
