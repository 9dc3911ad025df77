//! Fuzz harnesses of [`Selector::parse`] (label selectors come from plugins' metadata and their
//! cache reads), run by [`crate::fuzz::run`].

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::fuzz;

/// Pieces selectors are made of, valid and not, for inputs near the grammar.
const TOKENS: &[&str] = &[
    "a",
    "app",
    "tier",
    "example.com/team",
    "x.y-z_1",
    "in",
    "notin",
    "=",
    "==",
    "!=",
    "!",
    "(",
    ")",
    ",",
    " ",
    " ",
    "v1",
    "web",
    "",
    "Bad_Prefix/x",
    "-k",
    "a/b/c",
    "we$b",
    "<",
    ">",
    "é",
    "\t",
    "=(",
    "in(",
    ",)",
];

/// Label keys and values the generated selectors and label sets share, so that matches happen.
const KEYS: &[&str] = &["a", "app", "tier", "example.com/team"];
const VALUES: &[&str] = &["", "v1", "web", "x"];

/// A string made of selector tokens, mostly of valid requirements joined by commas.
fn near_selector() -> impl Strategy<Value = String> {
    let key = prop::sample::select(KEYS);
    let value = prop::sample::select(VALUES);
    let set = prop::collection::vec(value.clone(), 0..4).prop_map(|vs| format!("({})", vs.join(",")));
    let requirement = prop_oneof![
        key.clone().prop_map(str::to_owned),
        key.clone().prop_map(|k| format!("!{k}")),
        (key.clone(), prop::sample::select(&["=", "==", "!=", " = ", "!= "][..]), value).prop_map(|(k, op, v)| format!("{k}{op}{v}")),
        (key, prop::sample::select(&[" in ", " notin ", " in", "in "][..]), set).prop_map(|(k, op, s)| format!("{k}{op}{s}")),
        prop::collection::vec(prop::sample::select(TOKENS), 1..6).prop_map(|t| t.concat()),
    ];
    prop::collection::vec(requirement, 0..5).prop_map(|rs| rs.join(","))
}

/// Arbitrary text, or text near the grammar.
fn selector_text() -> impl Strategy<Value = String> {
    prop_oneof![1 => any::<String>(), 1 => "[a-z=!(), ]{0,24}", 4 => near_selector()]
}

/// A label set over [`KEYS`] and [`VALUES`].
fn labels() -> impl Strategy<Value = BTreeMap<&'static str, &'static str>> {
    prop::collection::btree_map(prop::sample::select(KEYS), prop::sample::select(VALUES), 0..4)
}

/// `Selector::parse` on any text: never panics; a refusal quotes the selector and gives a
/// reason. A selector that parses has a canonical form (`Display`) that parses to the same
/// selector and prints the same again, and matching it against any label set agrees with
/// matching its canonical form and with [`Selector::required_pairs`] (an object it matches
/// carries one pair of every group, which is what an index by label relies on).
#[test]
fn fuzz_selector_parse() {
    fuzz::run(file!(), "selector", (selector_text(), prop::collection::vec(labels(), 1..4)), |(text, label_sets)| {
        let sel = match Selector::parse(&text) {
            Ok(sel) => sel,
            Err(e) => {
                prop_assert_eq!(&e.selector, &text);
                prop_assert!(!e.reason.to_string().is_empty(), "{text:?}: empty reason");
                return Ok(false);
            }
        };
        let canonical = sel.to_string();
        let again = Selector::parse(&canonical).map_err(|e| TestCaseError::fail(format!("{text:?} → {canonical:?}: {e}")))?;
        prop_assert_eq!(&again, &sel, "{:?} → {:?}", text, canonical);
        prop_assert_eq!(again.to_string(), canonical.clone());
        for labels in &label_sets {
            let get = |k: &str| labels.get(k).copied();
            let matched = sel.matches_with(get);
            prop_assert_eq!(matched, again.matches_with(get));
            if matched {
                for group in sel.required_pairs() {
                    let carried = group.iter().any(|pair| labels.iter().any(|(k, v)| label_pair(k, v) == *pair));
                    prop_assert!(carried, "{canonical:?} matches {labels:?} without any of {group:?}");
                }
            }
        }
        Ok(true)
    });
}
