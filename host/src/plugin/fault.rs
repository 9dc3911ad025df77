//! How a call into the guest failed, told apart for counters and for the message an operator
//! reads: out of its deadline, out of memory, a trap (with the tail of its stderr), or a failure
//! of the host side of the call.

use std::time::Duration;

use wasmtime::Trap;

use super::host::HostState;
use super::limits::{self, Limits};

/// How a call into the guest failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum GuestFault {
    /// Interrupted at its deadline (an epoch interrupt, or cancelled while waiting in the host).
    Timeout(Duration),
    /// Failed after the limiter refused a memory growth.
    OutOfMemory {
        /// The plugin's memory limit, in bytes.
        limit: u64,
        /// What the refused growth asked for.
        requested: Option<usize>,
        /// The trap or error that followed.
        detail: String,
    },
    /// Any other trap (panic, `unreachable`, bad memory access).
    Trap {
        /// The trap.
        detail: String,
        /// The last lines the guest wrote to stderr.
        stderr: String,
    },
    /// Not a trap: the host side of the call failed (linking, instance pool, ...).
    Host(String),
}

impl GuestFault {
    /// What `err`, returned by a call whose Store held `state`, says happened.
    pub(super) fn classify(err: &wasmtime::Error, state: &HostState, limits: &Limits) -> Self {
        tracing::debug!(target: "wasmloop::plugin", error = ?err, "guest call failed");
        let trap = err.downcast_ref::<Trap>().copied();
        if trap == Some(Trap::Interrupt) {
            return GuestFault::Timeout(limits.timeout);
        }
        // The trap itself ("wasm `unreachable` instruction executed"), else the error's text.
        let detail = trap.map(|t| t.to_string()).unwrap_or_else(|| first_line(&format!("{err:#}")));
        if let Some(requested) = state.limiter.refused {
            return GuestFault::OutOfMemory { limit: limits.memory.bytes(), requested: Some(requested), detail };
        }
        match trap {
            Some(_) => GuestFault::Trap { detail, stderr: state.output.stderr_tail() },
            None => GuestFault::Host(format!("{err:#}")),
        }
    }

    /// The sentence an operator reads: which plugin, in which `call`, what happened.
    pub(super) fn describe(&self, plugin: &str, call: &str) -> String {
        match self {
            GuestFault::Timeout(t) => format!(
                "plugin {plugin} timed out: {call} ran longer than its {} limit and was interrupted; the instance was discarded",
                crate::duration::format(*t)
            ),
            GuestFault::OutOfMemory { limit, requested, detail } => {
                let requested = requested.map(|r| format!(" (asked for {} bytes)", r)).unwrap_or_default();
                format!(
                    "plugin {plugin} ran out of memory in {call}: linear memory may not grow past its {} limit{requested}, \
                     then: {detail}; the instance was discarded",
                    limits::ByteSize(*limit)
                )
            }
            GuestFault::Trap { detail, stderr } => {
                let stderr = if stderr.is_empty() {
                    String::new()
                } else {
                    let lines: Vec<&str> = stderr
                        .lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
                        .collect();
                    format!("; guest stderr: {}", lines.join(" "))
                };
                format!("plugin {plugin} trapped in {call}: {detail}{stderr}; the instance was discarded")
            }
            GuestFault::Host(e) => format!("plugin {plugin}: {call} failed: {e}"),
        }
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trap_is_described_with_the_guest_stderr_without_the_backtrace_hint() {
        let fault = GuestFault::Trap {
            detail: "wasm `unreachable` instruction executed".into(),
            stderr: "thread panicked at src/lib.rs:3:5:\nboom\nnote: run with `RUST_BACKTRACE=1` to display a backtrace\n".into(),
        };
        assert_eq!(
            fault.describe("podset", "reconcile"),
            "plugin podset trapped in reconcile: wasm `unreachable` instruction executed; guest stderr: \
             thread panicked at src/lib.rs:3:5: boom; the instance was discarded"
        );
    }

    #[test]
    fn out_of_memory_names_the_limit_and_the_request() {
        let fault = GuestFault::OutOfMemory { limit: 64 << 20, requested: Some(1 << 30), detail: "trap".into() };
        let text = fault.describe("p", "reconcile");
        assert!(text.contains("may not grow past its 64Mi limit (asked for 1073741824 bytes)"), "{text}");
    }
}
