//! What `wasmloop dev` prints, and how it learns that a version reconciled: the host's own
//! tracing, filtered for a developer, plus a layer that reports every reconcile line.

use tokio::sync::broadcast;
use tokio::time::Instant;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};
use wasmloop::controller::RECONCILE_LOG;

/// The tracing target of `wasmloop dev`'s own lines.
pub const DEV_LOG: &str = "wasmloop::dev";

/// A reconcile finished: when, and which build ran it (the `digest` field of the line).
#[derive(Clone, Debug)]
pub struct Reconciled {
    pub at: Instant,
    pub digest: String,
}

/// Install the subscriber: this command's lines, plugin loads, one line per reconcile (its
/// actions, result, duration) and the plugin's own log lines and output, on stderr;
/// `RUST_LOG` overrides. Returns a sender whose receivers see every reconcile.
pub fn init() -> broadcast::Sender<Reconciled> {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| format!("warn,{DEV_LOG}=info,wasmloop::hotload=info,{RECONCILE_LOG}=debug,wasmloop::plugin=debug").into());
    let (tx, _) = broadcast::channel(1024);
    let probe = ReconcileProbe(tx.clone())
        .with_filter(tracing_subscriber::filter::Targets::new().with_target(RECONCILE_LOG, tracing::Level::DEBUG));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi).compact().with_filter(filter);
    let _ = tracing_subscriber::registry().with(fmt).with(probe).try_init();
    tx
}

/// Sends a [`Reconciled`] for every reconcile line.
struct ReconcileProbe(broadcast::Sender<Reconciled>);

impl<S: tracing::Subscriber> Layer<S> for ReconcileProbe {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() != RECONCILE_LOG {
            return;
        }
        let mut digest = DigestField(String::new());
        event.record(&mut digest);
        let _ = self.0.send(Reconciled { at: Instant::now(), digest: digest.0 });
    }
}

struct DigestField(String);

impl Visit for DigestField {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "digest" {
            self.0 = value.to_string();
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "digest" {
            self.0 = format!("{value:?}").trim_matches('"').to_string();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_reads_the_digest_of_reconcile_lines_only() {
        let (tx, mut rx) = broadcast::channel(8);
        let subscriber = tracing_subscriber::registry().with(ReconcileProbe(tx));
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(target: "wasmloop::controller", digest = "sha256:other", "not a reconcile line");
            tracing::debug!(target: RECONCILE_LOG, result = "success", took_ms = 1.5, digest = "sha256:abc", "no actions");
        });
        let seen = rx.try_recv().unwrap();
        assert_eq!(seen.digest, "sha256:abc");
        assert!(rx.try_recv().is_err(), "only the reconcile line is reported");
    }
}
