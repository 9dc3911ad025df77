//! One pass over an object's JSON text for its `metadata` and the declared field paths: the
//! subtrees along the paths are followed key by key, everything else is skipped unparsed
//! (`IgnoredAny`: scanned, nothing allocated), and each path's value is captured as raw text.
//! What `field` reads from the object parsed whole, at the cost of one scan.

use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use wasmloop_model::field::top_level;

/// The declared paths, as a tree of keys, an object's text is scanned for.
#[derive(Debug)]
pub(super) struct Plan<'p> {
    root: Node<'p>,
    /// Slots: one per path.
    slots: usize,
}

#[derive(Debug, Default)]
struct Node<'p> {
    /// Where this node's value goes, if a path ends here.
    slot: Option<usize>,
    /// The top-level `metadata`, deserialized in the same pass.
    metadata: bool,
    children: Vec<(&'p str, Node<'p>)>,
}

impl<'p> Plan<'p> {
    /// The plan for `paths`; `None` where a path cannot be followed this way: one under
    /// `metadata` (label and annotation keys contain dots) or one that extends another path.
    pub(super) fn new(paths: &[&'p str]) -> Option<Self> {
        let mut root = Node::default();
        for (slot, path) in paths.iter().enumerate() {
            if top_level(path) == "metadata" {
                return None;
            }
            let mut node = &mut root;
            for segment in path.split('.') {
                if node.slot.is_some() {
                    return None; // extends a path that ends above
                }
                let i = match node.children.iter().position(|(k, _)| *k == segment) {
                    Some(i) => i,
                    None => {
                        node.children.push((segment, Node::default()));
                        node.children.len() - 1
                    }
                };
                node = &mut node.children[i].1;
            }
            if node.slot.is_some() || !node.children.is_empty() {
                return None; // a duplicate, or a prefix of another path
            }
            node.slot = Some(slot);
        }
        root.children.push(("metadata", Node { metadata: true, ..Node::default() }));
        Some(Plan { root, slots: paths.len() })
    }

    /// `text`'s `metadata` as an `M` and each path's value (in path order), raw; `None` where
    /// the text does not scan (not an object, `metadata` not an `M`, escaped keys along a path).
    pub(super) fn scan<'t, M: Deserialize<'t>>(&self, text: &'t str) -> Option<(Option<M>, Vec<Option<&'t RawValue>>)> {
        let mut found = vec![None; self.slots];
        let mut metadata = None;
        let mut de = serde_json::Deserializer::from_str(text);
        Seek { node: &self.root, found: &mut found, metadata: &mut metadata }.deserialize(&mut de).ok()?;
        de.end().ok()?;
        Some((metadata, found))
    }
}

/// Follows one node of the plan through the value being deserialized.
struct Seek<'n, 'p, 'f, 't, M> {
    node: &'n Node<'p>,
    found: &'f mut [Option<&'t RawValue>],
    metadata: &'f mut Option<M>,
}

impl<'t, M: Deserialize<'t>> DeserializeSeed<'t> for Seek<'_, '_, '_, 't, M> {
    type Value = ();

    fn deserialize<D: Deserializer<'t>>(self, d: D) -> Result<(), D::Error> {
        if self.node.metadata {
            *self.metadata = Some(M::deserialize(d)?);
            return Ok(());
        }
        match self.node.slot {
            Some(slot) => {
                self.found[slot] = Some(<&'t RawValue>::deserialize(d)?);
                Ok(())
            }
            None => d.deserialize_any(self),
        }
    }
}

impl<'t, M: Deserialize<'t>> Visitor<'t> for Seek<'_, '_, '_, 't, M> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'t>>(self, mut map: A) -> Result<(), A::Error> {
        // Keys borrowed from the text: one with escapes fails the scan (the caller reads slowly).
        while let Some(key) = map.next_key::<&'t str>()? {
            match self.node.children.iter().find(|(k, _)| *k == key) {
                Some((_, child)) => map.next_value_seed(Seek { node: child, found: &mut *self.found, metadata: &mut *self.metadata })?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'t>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0usize;
        loop {
            let child = self.node.children.iter().find(|(k, _)| k.parse::<usize>() == Ok(i));
            let more = match child {
                Some((_, child)) => {
                    seq.next_element_seed(Seek { node: child, found: &mut *self.found, metadata: &mut *self.metadata })?.is_some()
                }
                None => seq.next_element::<IgnoredAny>()?.is_some(),
            };
            if !more {
                return Ok(());
            }
            i += 1;
        }
    }

    // Scalars hold no path.
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_refuse_what_one_pass_cannot_follow() {
        assert!(Plan::new(&["spec.nodeName", "status.phase", "status.conditions.0.type"]).is_some());
        for paths in
            [&["labels.app"][..], &["metadata.annotations.a.io/x"], &["status", "status.phase"], &["status.phase", "status"], &["a", "a"]]
        {
            assert!(Plan::new(paths).is_none(), "{paths:?}");
        }
    }

    #[test]
    fn one_pass_captures_metadata_and_each_path() {
        let text = r#"{"kind":"Pod","metadata":{"name":"a"},"spec":{"x":[1,{"y":2}],"nodeName":"n1","containers":[{"image":"i0"},{"image":"i1"}]},"status":{"phase":null}}"#;
        let plan =
            Plan::new(&["spec.nodeName", "spec.containers.1.image", "status.phase", "spec.containers.5.image", "spec.nodeName.x", "nope"]);
        assert!(plan.is_none(), "spec.nodeName.x extends spec.nodeName");
        let plan =
            Plan::new(&["spec.nodeName", "spec.containers.1.image", "status.phase", "spec.containers.5.image", "nope", "kind.x"]).unwrap();
        let (metadata, found) = plan.scan::<serde_json::Value>(text).unwrap();
        assert_eq!(metadata, Some(serde_json::json!({"name": "a"})));
        let found: Vec<Option<&str>> = found.iter().map(|r| r.map(RawValue::get)).collect();
        assert_eq!(found, [Some("\"n1\""), Some("\"i1\""), Some("null"), None, None, None]);
        let scan = |text| plan.scan::<serde_json::Value>(text);
        assert!(scan(r#"{"spec":{"a\"b":1}}"#).is_none(), "an escaped key along a path");
        assert!(scan(r#"{"other":{"a\"b":1}}"#).is_some(), "an escaped key elsewhere is skipped");
        assert!(scan("[1]").is_some_and(|(m, f)| m.is_none() && f.iter().all(Option::is_none)));
        assert!(scan("{} x").is_none());
        assert!(plan.scan::<u8>(r#"{"metadata":{}}"#).is_none(), "metadata of another type");
    }
}
