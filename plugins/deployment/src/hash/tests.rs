use serde_json::{Value, json};

use super::*;

/// Templates (`testdata/templates.jsonl`) and what KCM v1.20.2's code computes for each
/// (`testdata/golden.jsonl`, written by `tools/spew-oracle.sh`: the printing, the hash, and the
/// hash with collisionCount 1).
fn corpus() -> Vec<(Value, Value)> {
    let templates = include_str!("testdata/templates.jsonl").lines().map(|l| serde_json::from_str(l).unwrap());
    let golden = include_str!("testdata/golden.jsonl").lines().map(|l| serde_json::from_str(l).unwrap());
    templates.zip(golden).collect()
}

#[test]
fn printing_and_hash_are_kcms() {
    let corpus = corpus();
    assert!(corpus.len() >= 6);
    for (i, (template, golden)) in corpus.iter().enumerate() {
        let printed = printing(template);
        let expected = golden["printing"].as_str().unwrap();
        if printed != expected {
            let at = printed.bytes().zip(expected.bytes()).take_while(|(a, b)| a == b).count();
            panic!(
                "template {i}: printings differ at byte {at}:\n  ours: …{}\n  KCM:  …{}",
                &printed[at.saturating_sub(80)..],
                &expected[at.saturating_sub(80)..]
            );
        }
        let h = compute(template, None);
        assert_eq!((h.value.as_str(), h.exact), (golden["hash"].as_str().unwrap(), true), "template {i}");
        assert_eq!(compute(template, Some(1)).value, golden["hashCollision1"].as_str().unwrap(), "template {i}");
    }
}

#[test]
fn safe_encoding_maps_digits_as_kcm() {
    assert_eq!(safe_encode("0123456789"), "456789bcdf");
}

#[test]
fn what_json_cannot_rebuild_is_flagged() {
    let set_time = json!({"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}});
    assert!(!compute(&set_time, None).exact);
    let huge =
        json!({"spec": {"containers": [{"name": "c", "resources": {"limits": {"memory": "1234567890123456789012345678901234567890"}}}]}});
    assert!(!compute(&huge, None).exact);
    assert!(compute(&json!({}), None).exact);
}
