//! A controller setting out of its range ([`InvalidSetting`]), from a manifest or the flags:
//! which setting, as the manifest spells it, and what is wrong with its value.

/// A controller setting out of its range: which one, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting} {problem}")]
pub struct InvalidSetting {
    /// The setting as the manifest spells it (`budgets.keysPerEvent`, `api.qps`).
    pub setting: String,
    /// What is wrong with its value (`must be at least 1`).
    pub problem: String,
}

impl InvalidSetting {
    /// `setting` has a value that `problem` explains.
    pub(crate) fn new(setting: impl Into<String>, problem: impl Into<String>) -> Self {
        Self { setting: setting.into(), problem: problem.into() }
    }
}
