//! What a guest writes (stdout, stderr, `log` calls), forwarded into `tracing` line by line,
//! tagged with the plugin and key, within a per-call byte budget reserved from the plugin's
//! per-minute allowance ([`OutputRate`]); the tail of stderr is kept to explain a trap.

use std::sync::Arc;

use parking_lot::Mutex;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// The guest's stdout, stderr and `log` calls of one call, forwarded into `tracing` line by line
/// within a byte budget. What exceeds the budget is dropped and reported once.
#[derive(Clone)]
pub struct GuestOutput {
    plugin: Arc<str>,
    key: Option<String>,
    state: Arc<Mutex<OutputState>>,
    /// The plugin's per-minute allowance this call's budget was reserved from.
    rate: Option<Arc<OutputRate>>,
}

/// How many bytes of output (stdout, stderr, `log`) one plugin may send to the host's log per
/// minute, across all its calls; what is over is dropped and counted.
#[derive(Debug)]
pub struct OutputRate {
    per_minute: usize,
    /// (start of the current minute, bytes reserved in it)
    window: Mutex<(std::time::Instant, usize)>,
    dropped: std::sync::atomic::AtomicU64,
}

impl OutputRate {
    pub fn new(per_minute: usize) -> Self {
        Self { per_minute, window: Mutex::new((std::time::Instant::now(), 0)), dropped: Default::default() }
    }

    /// Reserve up to `wanted` bytes of this minute's allowance.
    fn reserve(&self, wanted: usize) -> usize {
        let mut w = self.window.lock();
        if w.0.elapsed() >= std::time::Duration::from_secs(60) {
            *w = (std::time::Instant::now(), 0);
        }
        let take = wanted.min(self.per_minute.saturating_sub(w.1));
        w.1 += take;
        take
    }

    /// Give back what a call reserved and did not use; count what it dropped.
    fn settle(&self, unused: usize, dropped: usize) {
        let mut w = self.window.lock();
        w.1 = w.1.saturating_sub(unused);
        self.dropped.fetch_add(dropped as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// Bytes of output dropped so far (per-call and per-minute limits).
    pub fn dropped_bytes(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[derive(Default)]
struct OutputState {
    budget: usize,
    /// The per-call budget before the per-minute allowance cut it (for messages).
    requested: usize,
    used: usize,
    dropped: usize,
    partial: [Vec<u8>; 2],
    /// The last stderr lines (bounded), quoted in trap messages (a Rust panic prints there).
    stderr_tail: String,
}

const STDERR_TAIL: usize = 512;

impl GuestOutput {
    #[cfg(test)]
    fn new(plugin: Arc<str>, key: Option<String>, budget: usize) -> Self {
        let state = OutputState { budget, ..OutputState::default() };
        Self { plugin, key, state: Arc::new(Mutex::new(state)), rate: None }
    }

    /// A call's output: at most `per_call` bytes, reserved from the plugin's per-minute `rate`.
    pub(super) fn metered(plugin: Arc<str>, key: Option<String>, per_call: usize, rate: Arc<OutputRate>) -> Self {
        let budget = rate.reserve(per_call);
        let state = OutputState { budget, requested: per_call, ..OutputState::default() };
        Self { plugin, key, state: Arc::new(Mutex::new(state)), rate: Some(rate) }
    }

    pub(super) fn stream(&self, name: &'static str) -> GuestStream {
        GuestStream { output: self.clone(), stderr: name == "stderr" }
    }

    /// Charge `message` to the budget: None if it's exhausted (and counts what is dropped).
    pub(super) fn take_budget(&self, mut message: String) -> Option<String> {
        let mut st = self.state.lock();
        let left = st.budget.saturating_sub(st.used);
        if left == 0 {
            st.dropped += message.len();
            return None;
        }
        if message.len() > left {
            st.dropped += message.len() - left;
            let mut cut = left;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        st.used += message.len();
        Some(message)
    }

    fn write(&self, stderr: bool, bytes: &[u8]) {
        let mut st = self.state.lock();
        let left = st.budget.saturating_sub(st.used);
        let take = bytes.len().min(left);
        st.dropped += bytes.len() - take;
        st.used += take;
        let idx = usize::from(stderr);
        st.partial[idx].extend_from_slice(&bytes[..take]);
        while let Some(pos) = st.partial[idx].iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = st.partial[idx].drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line[..pos]).into_owned();
            self.emit(&mut st, stderr, line);
        }
    }

    fn emit(&self, st: &mut OutputState, stderr: bool, line: String) {
        let plugin = &*self.plugin;
        let key = self.key.as_deref().unwrap_or("-");
        let stream = if stderr { "stderr" } else { "stdout" };
        tracing::info!(target: "wasmloop::plugin::output", plugin, key, stream, "{line}");
        if stderr {
            st.stderr_tail.push_str(&line);
            st.stderr_tail.push('\n');
            if st.stderr_tail.len() > STDERR_TAIL {
                let mut cut = st.stderr_tail.len() - STDERR_TAIL;
                while !st.stderr_tail.is_char_boundary(cut) {
                    cut += 1;
                }
                st.stderr_tail.drain(..cut);
            }
        }
    }

    /// Emit unterminated lines and report dropped output. Called after each call.
    pub fn flush(&self) {
        let mut st = self.state.lock();
        for idx in 0..2 {
            if !st.partial[idx].is_empty() {
                let line = String::from_utf8_lossy(&std::mem::take(&mut st.partial[idx])).into_owned();
                self.emit(&mut st, idx == 1, line);
            }
        }
        if let Some(rate) = &self.rate {
            rate.settle(st.budget - st.used, st.dropped);
            st.budget = st.used;
        }
        if st.dropped > 0 {
            let (plugin, dropped) = (&*self.plugin, st.dropped);
            if st.budget < st.requested && st.used == st.budget {
                let per_minute = self.rate.as_ref().map_or(0, |r| r.per_minute);
                tracing::warn!(target: "wasmloop::plugin::output", plugin, dropped, "guest output over the plugin's {per_minute} bytes per minute was dropped");
            } else {
                let budget = st.budget;
                tracing::warn!(target: "wasmloop::plugin::output", plugin, dropped, "guest output over its {budget}-byte budget was dropped");
            }
            st.dropped = 0;
        }
    }

    /// The last stderr lines, trimmed (empty if none).
    pub fn stderr_tail(&self) -> String {
        self.state.lock().stderr_tail.trim().to_owned()
    }
}

/// One handle on the guest's stdout or stderr.
pub(super) struct GuestStream {
    output: GuestOutput,
    stderr: bool,
}

impl IsTerminal for GuestStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(GuestStream { output: self.output.clone(), stderr: self.stderr })
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(tokio::io::empty())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestStream {
    async fn ready(&mut self) {}
}

impl OutputStream for GuestStream {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.output.write(self.stderr, &bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always writable: what exceeds the budget is dropped, never blocks or traps.
        Ok(64 * 1024)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(budget: usize) -> GuestOutput {
        GuestOutput::new(Arc::from("p"), Some("k".into()), budget)
    }

    #[test]
    fn output_is_split_into_lines_within_the_budget() {
        let out = output(20);
        out.write(true, b"first line\nsecond");
        out.write(true, b" line and much more");
        {
            let st = out.state.lock();
            assert_eq!(st.used, 20);
            assert_eq!(st.dropped, 16);
            assert_eq!(st.stderr_tail, "first line\n");
            assert_eq!(st.partial[1], b"second li");
        }
        out.flush();
        assert_eq!(out.stderr_tail(), "first line\nsecond li");
        assert_eq!(out.state.lock().dropped, 0, "dropped bytes are reported once");
        assert_eq!(out.take_budget("more".into()), None, "the budget is shared with log calls");
    }

    #[test]
    fn log_messages_are_cut_at_a_char_boundary() {
        let out = output(5);
        assert_eq!(out.take_budget("abcé".into()).as_deref(), Some("abcé"));
        let out = output(4);
        assert_eq!(out.take_budget("abcé".into()).as_deref(), Some("abc"), "é is two bytes");
        assert_eq!(out.take_budget("xz".into()).as_deref(), Some("x"));
        assert_eq!(out.take_budget("y".into()), None);
    }

    #[test]
    fn the_per_minute_allowance_is_shared_by_calls_and_unused_bytes_come_back() {
        let rate = Arc::new(OutputRate::new(10));
        let first = GuestOutput::metered(Arc::from("p"), None, 8, rate.clone());
        let second = GuestOutput::metered(Arc::from("p"), None, 8, rate.clone());
        assert_eq!(first.take_budget("abcdefghij".into()).as_deref(), Some("abcdefgh"));
        assert_eq!(second.take_budget("xyz".into()).as_deref(), Some("xy"), "only 2 bytes were left this minute");
        first.flush();
        second.flush();
        assert_eq!(rate.dropped_bytes(), 3);
        let third = GuestOutput::metered(Arc::from("p"), None, 8, rate.clone());
        assert_eq!(third.take_budget("q".into()), None, "the minute's 10 bytes are used up");
        third.flush();
        assert_eq!(rate.dropped_bytes(), 4);
    }

    #[test]
    fn the_stderr_tail_stays_bounded() {
        let out = output(1 << 20);
        for i in 0..200 {
            out.write(true, format!("line {i}\n").as_bytes());
        }
        let tail = out.stderr_tail();
        assert!(tail.len() <= STDERR_TAIL && tail.ends_with("line 199"), "{tail}");
    }
}
