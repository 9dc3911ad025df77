//! What `/proc` says about a process: resident memory and CPU time.

use anyhow::{Context, Result};

/// `VmRSS` of `pid`, in bytes.
pub fn rss_bytes(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).with_context(|| format!("reading /proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).with_context(|| format!("no VmRSS in /proc/{pid}/status"))?;
    let kb: u64 = line.split_whitespace().nth(1).context("VmRSS has no value")?.parse().context("VmRSS value")?;
    Ok(kb * 1024)
}

/// `RssAnon`, `RssFile` and `RssShmem` of `pid`, in bytes: where the resident memory is.
pub fn rss_parts(pid: u32) -> Result<[u64; 3]> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).with_context(|| format!("reading /proc/{pid}/status"))?;
    let field = |name: &str| -> Result<u64> {
        let line = status.lines().find(|l| l.starts_with(name)).with_context(|| format!("no {name} in /proc/{pid}/status"))?;
        Ok(line.split_whitespace().nth(1).context("no value")?.parse::<u64>()? * 1024)
    };
    Ok([field("RssAnon:")?, field("RssFile:")?, field("RssShmem:")?])
}

/// User + system CPU time `pid` has used so far, in seconds (all its threads).
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The command name (field 2) may contain spaces: fields are counted after its closing ')'.
    let rest = &stat[stat.rfind(')').context("malformed /proc/pid/stat")? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3, so utime (14) and stime (15) are at indexes 11 and 12.
    let utime: f64 = fields.get(11).context("no utime")?.parse()?;
    let stime: f64 = fields.get(12).context("no stime")?.parse()?;
    Ok((utime + stime) / clock_ticks())
}

/// Minor page faults the calling thread has taken so far (`minflt` of `/proc/thread-self/stat`):
/// pages first touched, and copy-on-write copies of a memory image.
pub fn thread_minor_faults() -> Result<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").context("reading /proc/thread-self/stat")?;
    let rest = &stat[stat.rfind(')').context("malformed /proc/thread-self/stat")? + 2..];
    // After ')': state is field 3, so minflt (10) is at index 7.
    rest.split_whitespace().nth(7).context("no minflt")?.parse().context("minflt")
}

fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// Median of `samples` readings of the RSS of `pid`, `every` apart (RSS moves a little while
/// allocators return memory and background tasks run).
pub fn settled_rss(pid: u32, samples: usize, every: std::time::Duration) -> Result<u64> {
    let mut v = Vec::with_capacity(samples);
    for i in 0..samples {
        if i > 0 {
            std::thread::sleep(every);
        }
        v.push(rss_bytes(pid)?);
    }
    v.sort_unstable();
    Ok(v[v.len() / 2])
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_own_process() {
        let me = std::process::id();
        assert!(super::rss_bytes(me).unwrap() > 100_000);
        assert!(super::cpu_seconds(me).unwrap() >= 0.0);
    }
}
