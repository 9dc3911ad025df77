//! Test plugin `sandbox-probe`: tries to reach outside its sandbox and reports what it saw as
//! the status of its object (a JSON object of strings and numbers):
//! - `readDir`, `readFile`, `writeFile`: `std::fs` on `/`, `/etc/hostname`, `/tmp/wasmloop-probe`;
//! - `env`, `args`: how many environment variables / arguments it sees;
//! - `tcp`: a connect to `127.0.0.1:<data.port>` of its ConfigMap; `udp`: a bind; `dns`: a lookup;
//! - writes one line to stdout and one to stderr.
#![cfg(target_arch = "wasm32")]

// Built against contract 0.2 (wit/compat/v0.2): the host must keep loading 0.2 plugins, and
// these fixtures prove it on every run.
wit_bindgen::generate!({ path: "../../../wit/compat/v0.2", world: "controller" });

use std::net::ToSocketAddrs;

use exports::wasmloop::controller::plugin::Guest;
use wasmloop::controller::cache;
use wasmloop::controller::types::*;

struct Plugin;
export!(Plugin);

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn outcome<T, E: std::fmt::Display>(r: Result<T, E>, ok: impl FnOnce(T) -> String) -> String {
    match r {
        Ok(v) => format!("ok: {}", ok(v)),
        Err(e) => format!("error: {e}"),
    }
}

/// `"port":"1234"` (or a number) from the object's JSON, without a JSON parser.
fn port(json: &str) -> u16 {
    let Some(at) = json.find("\"port\"") else { return 9 };
    json[at + 6..].chars().skip_while(|c| !c.is_ascii_digit()).take_while(char::is_ascii_digit).collect::<String>().parse().unwrap_or(9)
}

impl Guest for Plugin {
    fn metadata() -> PluginMetadata {
        PluginMetadata {
            name: "sandbox-probe".into(),
            version: "0.1.0".into(),
            reconciles: KindRef { api_version: "v1".into(), kind: "ConfigMap".into() },
            selector: None,
            watches: vec![],
            indexes: vec![],
            fields: vec![],
        }
    }

    fn reconcile(request: Request) -> Result<Outcome, ReconcileError> {
        let kind = KindRef { api_version: request.key.api_version.clone(), kind: request.key.kind.clone() };
        let json = cache::get(&kind, request.key.namespace.as_deref(), &request.key.name).ok().flatten().unwrap_or_default();
        let port = port(&json);

        let read_dir = outcome(std::fs::read_dir("/"), |d| format!("{} entries", d.count()));
        let read_file = outcome(std::fs::read("/etc/hostname"), |b| format!("{} bytes", b.len()));
        let write_file = outcome(std::fs::write("/tmp/wasmloop-probe", b"x"), |_| "written".into());
        let cwd = outcome(std::env::current_dir(), |p| p.display().to_string());
        let env = std::env::vars().count();
        let args = std::env::args().count();
        let tcp = outcome(std::net::TcpStream::connect(("127.0.0.1", port)), |_| "connected".into());
        let udp = outcome(std::net::UdpSocket::bind("127.0.0.1:0"), |_| "bound".into());
        let dns = outcome("localhost:80".to_socket_addrs(), |a| format!("{} addresses", a.count()));
        println!("sandbox-probe: stdout line");
        eprintln!("sandbox-probe: stderr line");

        let status = format!(
            r#"{{"readDir":{},"readFile":{},"writeFile":{},"cwd":{},"env":{env},"args":{args},"tcp":{},"udp":{},"dns":{},"port":{port}}}"#,
            json_str(&read_dir),
            json_str(&read_file),
            json_str(&write_file),
            json_str(&cwd),
            json_str(&tcp),
            json_str(&udp),
            json_str(&dns),
        );
        Ok(Outcome { actions: vec![Action::UpdateStatus(StatusUpdate { key: request.key, status })], requeue_after_ms: None })
    }
}
