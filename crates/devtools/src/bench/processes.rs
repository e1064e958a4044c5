//! The processes a bench run starts (the stand-ins and the daemons, each
//! the sibling binary of this one) and what they cost.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context};
use toki_app::Config;

use super::cores::{Cores, Role};

/// Kills a child process when dropped.
pub(super) struct Guard(Child);

impl Guard {
    pub(super) fn pid(&self) -> u32 {
        self.0.id()
    }
}

/// Stops daemons as an orchestrator would: SIGTERM to all, then each waited
/// for up to `grace` (a daemon on SQS finishes its open long polls first, so
/// that they hand no message to no one), killed after it.
pub(super) fn stop_fleet(fleet: Vec<Guard>, grace: std::time::Duration) {
    for g in &fleet {
        // SAFETY: kill(2) on a child's pid, which is ours until waited for.
        unsafe { libc::kill(g.pid() as libc::pid_t, libc::SIGTERM) };
    }
    let deadline = std::time::Instant::now() + grace;
    for mut g in fleet {
        while std::time::Instant::now() < deadline {
            if !matches!(g.0.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        drop(g); // killed if still running
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sibling_binary(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let path = exe.with_file_name(name);
    if !path.exists() {
        bail!(
            "{} not found next to {}; build it with `cargo build --release --bins`",
            name,
            exe.display()
        );
    }
    Ok(path)
}

/// Starts a stand-in process; returns it and the first line it printed.
fn start_process(name: &str, args: &[String], cores: Cores) -> anyhow::Result<(Guard, String)> {
    let mut cmd = Command::new(sibling_binary(name)?);
    cores.place(&mut cmd, Role::StandIn);
    let mut child = cmd
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    let stdout = child.stdout.take().context("stand-in stdout")?;
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)?;
    Ok((Guard(child), line.trim().to_owned()))
}

/// Starts the Slack stand-in process; returns it and its API base URL.
pub(super) fn start_standin(
    limit: Option<(u32, u32)>,
    cores: Cores,
) -> anyhow::Result<(Guard, String)> {
    let args: Vec<String> = match limit {
        Some((rate, burst)) => vec![
            "--rate-limit".into(),
            rate.to_string(),
            "--burst".into(),
            burst.to_string(),
        ],
        None => Vec::new(),
    };
    let (guard, base) = start_process("toki-slack-standin", &args, cores)?;
    if !base.starts_with("http://") {
        bail!("the Slack stand-in did not print its address (got {base:?})");
    }
    Ok((guard, base))
}

/// Starts the webhook receiver stand-in process; returns it and its base URL.
pub(super) fn start_webhook_standin(cores: Cores) -> anyhow::Result<(Guard, String)> {
    let (guard, base) = start_process("toki-webhook-standin", &[], cores)?;
    if !base.starts_with("http://") {
        bail!("the webhook stand-in did not print its address (got {base:?})");
    }
    Ok((guard, base))
}

/// Starts the SMTP stand-in process; returns it, its SMTP URL and its HTTP base URL.
pub(super) fn start_smtp_standin(cores: Cores) -> anyhow::Result<(Guard, String, String)> {
    let (guard, line) = start_process("toki-smtp-standin", &[], cores)?;
    match line.split_once(' ') {
        Some((smtp, http)) if smtp.starts_with("smtp://") && http.starts_with("http://") => {
            Ok((guard, smtp.to_owned(), http.to_owned()))
        }
        _ => bail!("the SMTP stand-in did not print its addresses (got {line:?})"),
    }
}

/// What every daemon process of a run is told, besides the run's configuration.
pub(super) struct DaemonArgs<'a> {
    /// The run's data folder; each daemon logs to `daemon-<i>.log` in it.
    pub dir: &'a Path,
    pub workers: usize,
    /// `TOKI_FLOW_LIMITS` (JSON).
    pub limits: &'a str,
    /// The Slack stand-in's base URL, when Slack deliveries go to it.
    pub slack_url: Option<&'a str>,
    /// The webhook receiver's base URL, when webhook deliveries go to it.
    pub webhook_url: Option<&'a str>,
    /// The receiver of the tenants' delivery events (`--events`), if any.
    pub events_url: Option<&'a str>,
    pub cores: Cores,
}

/// Starts `count` daemon processes (`toki daemon`), each configured through
/// its environment as `config` and `args` say.
pub(super) fn spawn_daemons(
    count: usize,
    config: &Config,
    args: &DaemonArgs,
) -> anyhow::Result<Vec<Guard>> {
    let mut fleet = Vec::with_capacity(count);
    for d in 0..count {
        let log = std::fs::File::create(args.dir.join(format!("daemon-{d}.log")))?;
        let mut cmd = Command::new(std::env::current_exe()?);
        args.cores.place(&mut cmd, Role::Daemon);
        cmd.args([
            "daemon",
            "--workers",
            &args.workers.to_string(),
            "--data-dir",
        ])
        .arg(args.dir)
        .env("TOKI_BACKEND", config.backend.to_string())
        .env("TOKI_LEAD_MS", config.pipeline.lead_ms.to_string())
        .env("TOKI_FLOW_LIMITS", args.limits)
        .stdout(Stdio::null())
        .stderr(log);
        if let Some(t) = &config.tenant_database_template {
            cmd.env("TOKI_DATABASE_URL_TEMPLATE", t.expose());
        }
        if let Some(url) = args.slack_url {
            cmd.env("TOKI_SLACK_TOKEN", "xoxb-toki-bench")
                .env("TOKI_SLACK_API_URL", format!("{url}/api"));
        }
        if args.webhook_url.is_some() || args.events_url.is_some() {
            // The receiver is on this machine: the operator's exception.
            cmd.env("TOKI_WEBHOOK_ALLOW_ADDRESSES", "127.0.0.1/32")
                .env("TOKI_WEBHOOK_ALLOW_HTTP", "true")
                .env("TOKI_WEBHOOK_ALLOW_PORTS", "1-65535");
        }
        if let Some(s) = &config.mail.smtp_url {
            cmd.env("TOKI_SMTP_URL", s.expose());
        }
        fleet.push(Guard(cmd.spawn().context("starting a daemon process")?));
    }
    Ok(fleet)
}

/// The largest peak RSS (MB) of the processes, and their CPU seconds in all.
pub(super) fn fleet_usage(pids: &[u32]) -> (f64, f64) {
    let usage: Vec<(f64, f64)> = pids.iter().map(|p| process_usage(*p)).collect();
    let peak_rss_mb = usage.iter().map(|u| u.0).fold(0.0, f64::max);
    let cpu_s = (usage.iter().map(|u| u.1).sum::<f64>() * 100.0).round() / 100.0;
    (peak_rss_mb, cpu_s)
}

/// Peak resident memory (MB) and CPU seconds of a process, from /proc.
fn process_usage(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let hwm_kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces): utime is the 12th, stime the 13th.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (
        (hwm_kb / 1024.0 * 10.0).round() / 10.0,
        ((ticks(11) + ticks(12)) / hz.max(1.0) * 100.0).round() / 100.0,
    )
}
