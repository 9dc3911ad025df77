//! Budgets on what a plugin declares: how many watches, selectors, indexes and index mappings,
//! how large a selector may be, how much memory its indexes' entries may take, how many keys one
//! change may map to, how many fields its metadata reads extract.
//!
//! Each has a documented default ([`Budgets::default`]) that the admin may raise per plugin in
//! `plugin.yaml` (`budgets: {watches: 32, indexMemory: 128Mi, ...}`) up to the host's maximum
//! ([`MAXIMA`]). A declaration over its budget is refused when the controller starts, naming the
//! budget, its value and the amount declared ([`Exceeded`]); the message never quotes a
//! selector. Index memory is measured once the informers have synced (refused then if over), and
//! watched afterwards ([`IndexMemoryWatch`]): growth past the budget later is logged, counted and
//! shown as a gauge, and the plugin keeps running.

use std::collections::HashSet;
use std::fmt;

use serde::Deserialize;

use super::invalid::InvalidSetting;
use crate::plugin::ByteSize;
use crate::reconciler::{MAX_FIELDS, MAX_SELECTOR_BYTES, Mapping, ReconcilerSpec};

/// What a plugin may declare. Defaults: [`Budgets::default`]; host maxima: [`MAXIMA`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Budgets {
    /// Watched kinds (`watches` entries). Default 16.
    pub watches: usize,
    /// Distinct (kind, label selector, annotation selector) triples with a selector, over the
    /// reconciled kind and the watches: each is an informer of its own (a LIST and a WATCH per
    /// namespace read). Default 8.
    pub selectors: usize,
    /// Bytes of one selector (label or annotation). Default 4Ki.
    pub selector_bytes: ByteSize,
    /// Declared indexes. Default 16.
    pub indexes: usize,
    /// Estimated heap bytes of the entries of the plugin's indexes (an index shared with another
    /// plugin counts in full for each). Default 64Mi.
    pub index_memory: ByteSize,
    /// Watches with an index mapping (the mappings that fan out). Default 8.
    pub index_mappings: usize,
    /// Index entries one change of a watched object may be mapped through, duplicates included
    /// (an object naming 500 values each held by 500 primaries counts 250 000). Default 10 000.
    pub keys_per_event: usize,
    /// Fields extracted by metadata reads. Default 64.
    pub fields: usize,
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            watches: 16,
            selectors: 8,
            selector_bytes: ByteSize::kib(4),
            indexes: 16,
            index_memory: ByteSize::mib(64),
            index_mappings: 8,
            keys_per_event: 10_000,
            fields: 64,
        }
    }
}

/// The most the admin may raise each budget to.
pub const MAXIMA: Budgets = Budgets {
    watches: 128,
    selectors: 64,
    selector_bytes: ByteSize(MAX_SELECTOR_BYTES as u64),
    indexes: 128,
    index_memory: ByteSize::mib(1024),
    index_mappings: 64,
    keys_per_event: 1_000_000,
    fields: MAX_FIELDS,
};

/// One of the budgets, by its name in `plugin.yaml`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Budget {
    /// [`Budgets::watches`].
    Watches,
    /// [`Budgets::selectors`].
    Selectors,
    /// [`Budgets::selector_bytes`].
    SelectorBytes,
    /// [`Budgets::indexes`].
    Indexes,
    /// [`Budgets::index_memory`].
    IndexMemory,
    /// [`Budgets::index_mappings`].
    IndexMappings,
    /// [`Budgets::keys_per_event`].
    KeysPerEvent,
    /// [`Budgets::fields`].
    Fields,
}

impl Budget {
    /// Every budget, in the order they are checked and documented.
    pub const ALL: [Budget; 8] = [
        Budget::SelectorBytes,
        Budget::Watches,
        Budget::Selectors,
        Budget::Indexes,
        Budget::IndexMappings,
        Budget::Fields,
        Budget::IndexMemory,
        Budget::KeysPerEvent,
    ];

    /// Its key under `budgets:` in `plugin.yaml` (and its metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Budget::Watches => "watches",
            Budget::Selectors => "selectors",
            Budget::SelectorBytes => "selectorBytes",
            Budget::Indexes => "indexes",
            Budget::IndexMemory => "indexMemory",
            Budget::IndexMappings => "indexMappings",
            Budget::KeysPerEvent => "keysPerEvent",
            Budget::Fields => "fields",
        }
    }

    /// Whether it counts bytes (printed as quantities).
    fn in_bytes(self) -> bool {
        matches!(self, Budget::SelectorBytes | Budget::IndexMemory)
    }

    /// Its amount in `budgets`.
    pub fn of(self, budgets: &Budgets) -> u64 {
        let n = match self {
            Budget::Watches => budgets.watches,
            Budget::Selectors => budgets.selectors,
            Budget::SelectorBytes => return budgets.selector_bytes.bytes(),
            Budget::Indexes => budgets.indexes,
            Budget::IndexMemory => return budgets.index_memory.bytes(),
            Budget::IndexMappings => budgets.index_mappings,
            Budget::KeysPerEvent => budgets.keys_per_event,
            Budget::Fields => budgets.fields,
        };
        n as u64
    }

    /// `n` of this budget's unit, as `plugin.yaml` writes it (`64Ki`; bytes that are no whole
    /// unit as `1627240 bytes`).
    fn amount(self, n: u64) -> String {
        match self.in_bytes() {
            true if n.is_multiple_of(1024) && n > 0 => ByteSize(n).to_string(),
            true => format!("{n} bytes"),
            false => n.to_string(),
        }
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A declaration over its budget: which budget, its value, what was declared and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "over the {budget} budget: {what} {declared}, the budget is {limit} (budgets.{budget} in plugin.yaml, at most {max})",
    declared = budget.amount(*declared),
    limit = budget.amount(*limit),
    max = budget.amount(budget.of(&MAXIMA))
)]
pub struct Exceeded {
    /// The budget.
    pub budget: Budget,
    /// Its value for this plugin.
    pub limit: u64,
    /// What the plugin declared (or, for index memory, what its indexes hold).
    pub declared: u64,
    /// What was counted: `declares watches:`, `watches[3].selector is` (never the selector).
    pub what: String,
}

impl Budgets {
    /// Check every budget against the host's maximum; the error names the first one over it.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        for budget in Budget::ALL {
            let (value, max) = (budget.of(self), budget.of(&MAXIMA));
            if value > max {
                return Err(InvalidSetting::new(
                    format!("budgets.{budget}"),
                    format!("is {}, over the host's maximum of {}", budget.amount(value), budget.amount(max)),
                ));
            }
        }
        if self.keys_per_event == 0 {
            return Err(InvalidSetting::new("budgets.keysPerEvent", "must be at least 1"));
        }
        Ok(())
    }

    /// Check what `spec` declares, before anything is started for it: the first budget it is
    /// over, in [`Budget::ALL`] order.
    pub fn check_spec(&self, spec: &ReconcilerSpec) -> Result<(), Exceeded> {
        let selectors = std::iter::once(("reconciles", spec.selector.as_deref(), spec.annotation_selector.as_deref()))
            .chain(spec.watches.iter().map(|w| ("watch", w.selector.as_deref(), w.annotation_selector.as_deref())));
        for (i, (owner, labels, annotations)) in selectors.enumerate() {
            let at = if owner == "watch" { format!("watches[{}]", i - 1) } else { owner.to_owned() };
            for (field, selector) in [("selector", labels), ("annotationSelector", annotations)] {
                let size = selector.map_or(0, str::len);
                self.within(Budget::SelectorBytes, size, || format!("{at}.{field} is"))?;
            }
        }
        self.within(Budget::Watches, spec.watches.len(), || "declares watches:".into())?;
        let selected: HashSet<_> = std::iter::once((&spec.reconciles, &spec.selector, &spec.annotation_selector))
            .chain(spec.watches.iter().map(|w| (&w.kind, &w.selector, &w.annotation_selector)))
            .filter(|(_, labels, annotations)| labels.is_some() || annotations.is_some())
            .collect();
        self.within(Budget::Selectors, selected.len(), || "declares distinct selectors:".into())?;
        let indexes: HashSet<_> = spec.indexes.iter().map(|i| (&i.kind, &i.name)).collect();
        self.within(Budget::Indexes, indexes.len(), || "declares indexes:".into())?;
        let mappings = spec.watches.iter().filter(|w| matches!(w.mapping, Mapping::Index { .. })).count();
        self.within(Budget::IndexMappings, mappings, || "declares index mappings:".into())?;
        self.within(Budget::Fields, spec.fields.len(), || "declares fields:".into())
    }

    /// Check the estimated bytes of the plugin's index entries.
    pub fn check_index_memory(&self, bytes: usize) -> Result<(), Exceeded> {
        self.within(Budget::IndexMemory, bytes, || "its indexes hold".into())
    }

    fn within(&self, budget: Budget, declared: usize, what: impl FnOnce() -> String) -> Result<(), Exceeded> {
        let (declared, limit) = (declared as u64, budget.of(self));
        if declared <= limit {
            return Ok(());
        }
        Err(Exceeded { budget, limit, declared, what: what() })
    }
}

/// Whether a plugin's index memory is over its budget, followed as it is measured again and
/// again: a pure transition from one measure to the next, saying when it crossed the budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexMemoryWatch {
    over: bool,
}

/// What one measure of a plugin's index memory changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crossing {
    /// On the same side of the budget as before.
    Same,
    /// It grew past the budget.
    Exceeded,
    /// It is back within the budget.
    Within,
}

impl IndexMemoryWatch {
    /// Take the measure `bytes` against `budget`.
    pub fn measure(&mut self, bytes: usize, budget: ByteSize) -> Crossing {
        let over = bytes as u64 > budget.bytes();
        let crossing = match (self.over, over) {
            (false, true) => Crossing::Exceeded,
            (true, false) => Crossing::Within,
            _ => Crossing::Same,
        };
        self.over = over;
        crossing
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::KindRef;
    use crate::reconciler::{FieldDecl, IndexDecl, IndexValue, WatchSpec};

    fn spec() -> ReconcilerSpec {
        ReconcilerSpec {
            name: "greedy".into(),
            version: "1.0.0".into(),
            reconciles: KindRef::new("v1", "ConfigMap"),
            selector: Some("app=web".into()),
            annotation_selector: None,
            watches: vec![],
            indexes: vec![],
            fields: vec![],
        }
    }

    fn watch(selector: Option<String>, mapping: Mapping) -> WatchSpec {
        WatchSpec { kind: KindRef::new("v1", "Secret"), mapping, selector, annotation_selector: None }
    }

    #[test]
    fn defaults_fit_the_maxima_and_a_raise_past_a_maximum_is_refused() {
        assert_eq!(Budgets::default().validate(), Ok(()));
        assert_eq!(MAXIMA.validate(), Ok(()));
        for budget in Budget::ALL {
            assert!(budget.of(&Budgets::default()) <= budget.of(&MAXIMA), "{budget}");
        }
        let over = Budgets { watches: 129, ..Budgets::default() };
        assert_eq!(over.validate().unwrap_err().to_string(), "budgets.watches is 129, over the host's maximum of 128");
        let over = Budgets { index_memory: ByteSize::mib(2048), ..Budgets::default() };
        assert_eq!(over.validate().unwrap_err().to_string(), "budgets.indexMemory is 2Gi, over the host's maximum of 1Gi");
        let zero = Budgets { keys_per_event: 0, ..Budgets::default() };
        assert_eq!(zero.validate().unwrap_err().setting, "budgets.keysPerEvent");
    }

    #[test]
    fn every_declaration_is_counted_against_its_budget() {
        let b = Budgets::default();
        assert_eq!(b.check_spec(&spec()), Ok(()));

        let mut s = spec();
        s.watches = (0..17).map(|_| watch(None, Mapping::Owner)).collect();
        let e = b.check_spec(&s).unwrap_err();
        assert_eq!((e.budget, e.limit, e.declared), (Budget::Watches, 16, 17));
        assert_eq!(
            e.to_string(),
            "over the watches budget: declares watches: 17, the budget is 16 (budgets.watches in plugin.yaml, at most 128)"
        );

        // Equal selectors on one kind are one informer; the reconciled kind's counts too.
        let mut s = spec();
        s.watches = (0..12).map(|i| watch(Some(format!("n={}", i % 8)), Mapping::Owner)).collect();
        let e = b.check_spec(&s).unwrap_err();
        assert_eq!((e.budget, e.declared), (Budget::Selectors, 9));
        s.watches.truncate(7);
        assert_eq!(b.check_spec(&s), Ok(()), "7 selectors on watches and the reconciled kind's");

        let mut s = spec();
        s.indexes = (0..17).map(|i| IndexDecl { kind: s.reconciles.clone(), name: format!("i{i}"), path: "spec.x".into() }).collect();
        assert_eq!(b.check_spec(&s).unwrap_err().budget, Budget::Indexes);

        let mut s = spec();
        let by_index = Mapping::Index { index: "i".into(), value: IndexValue::Name };
        s.watches = (0..9).map(|_| watch(None, by_index.clone())).collect();
        assert_eq!(b.check_spec(&s).unwrap_err().budget, Budget::IndexMappings);

        let mut s = spec();
        s.fields = (0..65).map(|_| FieldDecl { kind: s.reconciles.clone(), path: "status.phase".into() }).collect();
        assert_eq!(b.check_spec(&s).unwrap_err().budget, Budget::Fields);
        let raised = Budgets { fields: 65, ..b };
        assert_eq!(raised.check_spec(&s), Ok(()));
    }

    #[test]
    fn a_selector_over_its_size_is_named_by_where_it_is_never_quoted() {
        let huge = format!("app in ({})", (0..200_000).map(|i| format!("v{i}")).collect::<Vec<_>>().join(","));
        let mut s = spec();
        s.watches = vec![watch(None, Mapping::Owner), watch(Some(huge.clone()), Mapping::Owner)];
        let e = Budgets::default().check_spec(&s).unwrap_err();
        assert_eq!((e.budget, e.declared), (Budget::SelectorBytes, huge.len() as u64));
        let message = e.to_string();
        assert!(message.starts_with("over the selectorBytes budget: watches[1].selector is "), "{message}");
        assert!(message.ends_with(", the budget is 4Ki (budgets.selectorBytes in plugin.yaml, at most 64Ki)"), "{message}");
        assert!(message.len() < 200 && !message.contains("v1"), "{message}");
        let mut s = spec();
        s.annotation_selector = Some("a".repeat(5000));
        assert!(Budgets::default().check_spec(&s).unwrap_err().to_string().contains("reconciles.annotationSelector is 5000 bytes,"));
    }

    #[test]
    fn index_memory_is_checked_and_its_crossings_are_reported_once_each() {
        let b = Budgets { index_memory: ByteSize::kib(1), ..Budgets::default() };
        assert_eq!(b.check_index_memory(1024), Ok(()));
        assert!(b.check_index_memory(1500).unwrap_err().to_string().contains("its indexes hold 1500 bytes, the budget is 1Ki"));
        let e = b.check_index_memory(4096).unwrap_err();
        assert_eq!(
            e.to_string(),
            "over the indexMemory budget: its indexes hold 4Ki, the budget is 1Ki (budgets.indexMemory in plugin.yaml, at most 1Gi)"
        );
        let mut watch = IndexMemoryWatch::default();
        let seen: Vec<Crossing> = [10, 2000, 3000, 500, 600, 5000].iter().map(|&n| watch.measure(n, ByteSize::kib(1))).collect();
        assert_eq!(seen, [Crossing::Same, Crossing::Exceeded, Crossing::Same, Crossing::Within, Crossing::Same, Crossing::Exceeded]);
    }
}
