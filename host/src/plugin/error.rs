//! Why a plugin was not loaded ([`Error`]): every check loading makes, in the order it makes them.

use super::{contract, engine, limits};
use crate::grants;

/// Why a plugin was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The component does not compile.
    #[error(transparent)]
    Engine(#[from] engine::Error),
    /// The plugin's limits do not fit the engine.
    #[error("invalid limits: {0}")]
    Limits(#[from] limits::Error),
    /// The component's contract is not one this host runs.
    #[error(transparent)]
    Contract(#[from] contract::Error),
    /// The plugin imports something the host does not provide.
    #[error("the plugin imports what this host does not provide: {0}")]
    Link(String),
    /// Instantiating the plugin failed (a trap in its start, out of memory, ...).
    #[error("the plugin does not instantiate: {0}")]
    Instantiate(String),
    /// The plugin's `metadata()` trapped or timed out.
    #[error("metadata() failed: {0}")]
    Metadata(String),
    /// The plugin's `metadata()` answer is invalid.
    #[error("metadata() returned an invalid description: {0}")]
    InvalidMetadata(#[from] super::convert::MetadataError),
    /// The plugin's own name differs from the one its manifest gives.
    #[error(
        "the plugin calls itself {own:?} but its manifest (or ConfigMap) names it {manifest:?}: a plugin runs only \
         under its own name (set `name: {own}` in plugin.yaml, or name the ConfigMap {own}; to run it under another \
         name on purpose, say which plugin it is with `plugin: {own}`)"
    )]
    Identity {
        /// The name its `metadata()` gives.
        own: String,
        /// The name its manifest (or ConfigMap) gives.
        manifest: String,
    },
    /// The plugin's declared reads are not covered by its grants.
    #[error(transparent)]
    Grants(#[from] grants::Error),
}

/// A result whose error is a plugin that did not load.
pub type Result<T, E = Error> = std::result::Result<T, E>;
