//! The hosts' `/metrics`, for `wasmloop status`: where they come from, the samples in them, and
//! what they say per plugin.
//!
//! A host's metrics are reached through the API server's proxy to each host Pod (`GET
//! /api/v1/namespaces/<ns>/pods/<pod>:<port>/proxy/metrics`: the user's own kubeconfig and
//! RBAC, `get` on `pods/proxy`, no port-forward, every replica), or from URLs given with
//! `--metrics-url` (a port-forward, a host outside the cluster). Rates need two scrapes: the
//! reconcile and error counters are read twice, an interval apart.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Context;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde::Serialize;

/// Where one host's metrics are read.
#[derive(Clone, Debug)]
pub enum Source {
    /// A Pod, through the API server's proxy.
    Pod {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The metrics port (number or name).
        port: String,
    },
    /// A URL of a host's `/metrics`.
    Url(String),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Pod { namespace, name, .. } => write!(f, "pod/{namespace}/{name}"),
            Source::Url(url) => f.write_str(url),
        }
    }
}

/// The running host Pods in `namespace` matching `selector`, each read on `port`.
pub async fn pods(client: &kube::Client, namespace: &str, selector: &str, port: &str) -> anyhow::Result<Vec<Source>> {
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(selector))
        .await
        .with_context(|| format!("listing the host Pods in {namespace} ({selector})"))?;
    Ok(pods
        .items
        .into_iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|p| p.metadata.name)
        .map(|name| Source::Pod { namespace: namespace.to_string(), name, port: port.to_string() })
        .collect())
}

/// One scrape of one host: its samples, or why there are none.
pub struct Scrape {
    /// Where from.
    pub source: Source,
    /// When (for rates).
    pub at: Instant,
    /// The samples, or the error.
    pub samples: Result<Vec<Sample>, ScrapeError>,
}

/// Why a host's metrics could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// Through the API server's pod proxy.
    #[error(transparent)]
    Proxy(#[from] kube::Error),
    /// The proxy request could not be built (a pod or namespace name that is not a path).
    #[error(transparent)]
    Request(#[from] http::Error),
    /// From a URL.
    #[error("{0:#}")]
    Url(anyhow::Error),
}

/// Read `source`'s metrics once.
pub async fn scrape(client: &kube::Client, source: &Source) -> Scrape {
    let text = match source {
        Source::Pod { namespace, name, port } => {
            let path = format!("/api/v1/namespaces/{namespace}/pods/{name}:{port}/proxy/metrics");
            match http::Request::get(path).body(Vec::new()) {
                Ok(request) => client.request_text(request).await.map_err(ScrapeError::from),
                Err(e) => Err(ScrapeError::from(e)),
            }
        }
        Source::Url(url) => super::super::http_get_text(url).await.map_err(ScrapeError::Url),
    };
    Scrape { source: source.clone(), at: Instant::now(), samples: text.map(|t| parse(&t)) }
}

/// One sample: its name, labels and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The sample's name (`controller_runtime_reconcile_total`).
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// The samples of a Prometheus or OpenMetrics text exposition (comments and lines that do not
/// parse are skipped: this reads a host's figures, it does not validate the format).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(mut pairs) = rest.strip_prefix('{') {
        // key="value" pairs, separated by commas, until the closing brace.
        loop {
            pairs = pairs.trim_start_matches([',', ' ']);
            if let Some(after) = pairs.strip_prefix('}') {
                rest = after;
                break;
            }
            let (key, quoted) = pairs.split_once("=\"")?;
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let end = loop {
                match chars.next()? {
                    (_, '\\') => value.push(match chars.next()?.1 {
                        'n' => '\n',
                        other => other,
                    }),
                    (i, '"') => break i + 1,
                    (_, c) => value.push(c),
                }
            };
            labels.insert(key.trim().to_string(), value);
            pairs = &quoted[end..];
        }
    }
    let value = match rest.split_whitespace().next()? {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample { name: line[..name_end].to_string(), labels, value })
}

/// Sum of the samples named `name` whose `label` is `value` (0, not -0, when there are none).
fn sum(samples: &[Sample], name: &str, label: &str, value: &str) -> f64 {
    samples.iter().filter(|s| s.name == name && s.labels.get(label).is_some_and(|v| v == value)).fold(0.0, |total, s| total + s.value)
}

/// What the hosts' metrics say about one plugin, all hosts together.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginFigures {
    /// Reconciles per second over the interval (`None`: one scrape only).
    pub reconciles_per_second: Option<f64>,
    /// Failed reconciles per second over the interval.
    pub errors_per_second: Option<f64>,
    /// Failed reconciles since the hosts started.
    pub errors: f64,
    /// Keys queued now.
    pub queue_depth: f64,
    /// How long the oldest ready key has waited, in seconds (the most of any host).
    pub oldest_ready_seconds: f64,
}

/// `plugin`'s figures from `now`, with rates against `before` (the same hosts, earlier).
pub fn figures(plugin: &str, now: &[Scrape], before: Option<&[Scrape]>) -> PluginFigures {
    let ok = |scrapes: &[Scrape]| -> Vec<(String, Instant, Vec<Sample>)> {
        scrapes.iter().filter_map(|s| Some((s.source.to_string(), s.at, s.samples.as_ref().ok()?.clone()))).collect()
    };
    let now = ok(now);
    let reconciles = |s: &[Sample]| sum(s, "controller_runtime_reconcile_total", "controller", plugin);
    let errors = |s: &[Sample]| sum(s, "controller_runtime_reconcile_errors_total", "controller", plugin);
    let rate = |counter: &dyn Fn(&[Sample]) -> f64| -> Option<f64> {
        let before = ok(before?);
        let mut total = 0.0;
        for (source, at, samples) in &now {
            let Some((_, then, old)) = before.iter().find(|(s, ..)| s == source) else { continue };
            let seconds = at.duration_since(*then).as_secs_f64();
            // A counter that went down: the host restarted in between.
            let delta = (counter(samples) - counter(old)).max(0.0);
            if seconds > 0.0 {
                total += delta / seconds;
            }
        }
        Some(total)
    };
    PluginFigures {
        reconciles_per_second: rate(&reconciles),
        errors_per_second: rate(&errors),
        errors: now.iter().fold(0.0, |total, (_, _, s)| total + errors(s)),
        queue_depth: now.iter().fold(0.0, |total, (_, _, s)| total + sum(s, "workqueue_depth", "name", plugin)),
        oldest_ready_seconds: now
            .iter()
            .flat_map(|(_, _, s)| {
                s.iter()
                    .filter(|x| x.name == "wasmloop_workqueue_oldest_ready_seconds" && x.labels.get("name").is_some_and(|n| n == plugin))
            })
            .map(|x| x.value)
            .fold(0.0, f64::max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_parses_with_escapes_and_without_labels() {
        let text = "# HELP x y\n# TYPE controller_runtime_reconcile counter\n\
                    controller_runtime_reconcile_total{controller=\"podset\",result=\"success\"} 12\n\
                    wasmloop_plugin_state{namespace=\"wasmloop\",configmap=\"a\",state=\"Rejected\",reason=\"say \\\"no\\\", then\\\\\"} 1\n\
                    wasmloop_leader 0\nworkqueue_depth{name=\"podset\"} 3 1700000000\nbroken{name=\"x} 1\n# EOF\n";
        let samples = parse(text);
        assert_eq!(samples.len(), 4, "{samples:?}");
        assert_eq!(samples[0].labels["result"], "success");
        assert_eq!(samples[0].value, 12.0);
        assert_eq!(samples[1].labels["reason"], "say \"no\", then\\");
        assert_eq!((samples[2].name.as_str(), samples[2].value), ("wasmloop_leader", 0.0));
        assert_eq!(samples[3].value, 3.0, "a timestamp after the value is not the value");
    }

    #[test]
    fn rates_come_from_two_scrapes_of_the_same_hosts() {
        let at = Instant::now();
        let host = |name: &str, at: Instant, reconciles: u64, errors: u64, depth: u64| Scrape {
            source: Source::Url(name.to_string()),
            at,
            samples: Ok(parse(&format!(
                "controller_runtime_reconcile_total{{controller=\"podset\",result=\"success\"}} {reconciles}\n\
                 controller_runtime_reconcile_errors_total{{controller=\"podset\"}} {errors}\n\
                 workqueue_depth{{name=\"podset\"}} {depth}\n\
                 wasmloop_workqueue_oldest_ready_seconds{{name=\"podset\",priority=\"normal\"}} {depth}.5\n"
            ))),
        };
        let later = at + std::time::Duration::from_secs(2);
        let before = [host("a", at, 100, 1, 0), host("b", at, 50, 0, 0)];
        let now = [host("a", later, 120, 3, 4), host("b", later, 10, 0, 1), host("c", later, 7, 0, 0)];
        let f = figures("podset", &now, Some(&before));
        // a: +20 in 2 s; b restarted (counter went down): 0; c has no earlier scrape.
        assert_eq!(f.reconciles_per_second, Some(10.0));
        assert_eq!(f.errors_per_second, Some(1.0));
        assert_eq!((f.errors, f.queue_depth, f.oldest_ready_seconds), (3.0, 5.0, 4.5));
        assert_eq!(figures("podset", &now, None).reconciles_per_second, None);
        let other = figures("other", &now, None);
        assert_eq!((other.queue_depth, other.errors), (0.0, 0.0));
        assert!(other.errors.is_sign_positive(), "no samples print as 0, not -0");
    }
}
