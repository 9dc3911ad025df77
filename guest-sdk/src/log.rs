//! Logging into the host's log, tagged there with the plugin name and the key being reconciled.
//!
//! Use the macros: `wasmloop_sdk::info!("scaled {} to {}", name, n)`. On native builds the
//! messages go to the `testing` fake (which keeps them for assertions) or to stderr.

/// Log level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected, handled.
    Warn,
    /// A failure.
    Error,
}

/// Log `message` at `level`.
pub fn log(level: Level, message: &str) {
    crate::sys::log(level, message);
}

/// Log at trace level, `format!`-style.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Trace, &::std::format!($($arg)+)) };
}

/// Log at debug level, `format!`-style.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Debug, &::std::format!($($arg)+)) };
}

/// Log at info level, `format!`-style.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Info, &::std::format!($($arg)+)) };
}

/// Log at warn level, `format!`-style.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Warn, &::std::format!($($arg)+)) };
}

/// Log at error level, `format!`-style.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log::log($crate::log::Level::Error, &::std::format!($($arg)+)) };
}
