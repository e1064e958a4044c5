//! Toki processes for tests: started, known ready by the line they print (not
//! by polling), their stderr kept for assertions, stopped with a signal.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

pub const TOKI: &str = env!("CARGO_BIN_EXE_toki");

pub struct Process {
    child: Option<Child>,
    pid: u32,
    log: Arc<Mutex<String>>,
    /// Lines not yet looked at by `spawn` or `wait_line`.
    lines: Mutex<mpsc::Receiver<String>>,
}

impl Process {
    /// Starts `cmd` and waits for a stderr line containing `ready`; returns the
    /// process and that line.
    pub fn spawn(mut cmd: Command, ready: &str, timeout: Duration) -> (Process, String) {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the process starts");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel::<String>();
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                kept.lock().unwrap().push_str(&format!("{line}\n"));
                let _ = tx.send(line);
            }
        });
        let pid = child.id();
        let process = Process {
            child: Some(child),
            pid,
            log,
            lines: Mutex::new(rx),
        };
        let line = process.wait_line(|l| l.contains(ready), timeout);
        (process, line)
    }

    /// Waits for the next stderr line that `matches` (lines before it are
    /// passed over, and stay in `log`).
    pub fn wait_line(&self, matches: impl Fn(&str) -> bool, timeout: Duration) -> String {
        let rx = self.lines.lock().unwrap();
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if matches(&line) => return line,
                Ok(_) => {}
                Err(_) => panic!(
                    "no matching line within {timeout:?}; stderr:\n{}",
                    self.log()
                ),
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Everything it printed to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{signal} {} failed", self.pid);
    }

    /// Waits for the process to exit, up to `timeout` (then kills it and says None).
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let waiting = tokio::task::spawn_blocking(move || child.wait());
        match tokio::time::timeout(timeout, waiting).await {
            Ok(Ok(Ok(status))) => Some(status),
            _ => {
                self.signal("KILL");
                None
            }
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `toki tenant create TENANT` over `data`: the API key it printed once.
pub fn create_tenant(data: &std::path::Path, tenant: &str) -> String {
    let created = Command::new(TOKI)
        .args(["tenant", "create", tenant, "--data-dir"])
        .arg(data)
        .output()
        .unwrap();
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let key = String::from_utf8(created.stdout).unwrap().trim().to_owned();
    assert!(key.starts_with("toki_"), "the API key is printed: {key:?}");
    key
}

/// `toki serve` on a free 127.0.0.1 port over `data`, with what `configure`
/// adds (flags, environment): the process, once it said where it listens,
/// and its base URL.
pub fn serve(data: &std::path::Path, configure: impl FnOnce(&mut Command)) -> (Process, String) {
    let mut cmd = Command::new(TOKI);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data)
        // These tests drive the API as fast as it answers; the per-tenant
        // quota has its own (crates/app/tests/quota.rs). `configure` may
        // set it back.
        .env("TOKI_API_RATE", "1000000")
        .env("TOKI_API_BURST", "1000000")
        .env("TOKI_API_CONCURRENCY", "1000000");
    configure(&mut cmd);
    let (process, line) = Process::spawn(cmd, "registrar API on http://", Duration::from_secs(60));
    let base = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("the address")
        .to_owned();
    (process, base)
}

/// The database file of `tenant` in `data` (`tenants/<tenant>.<incarnation>.sqlite`,
/// a name that differs at each creation); there must be exactly one.
pub fn tenant_file(data: &std::path::Path, tenant: &str) -> std::path::PathBuf {
    let prefix = format!("{tenant}.");
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(data.join("tenants"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with(&prefix) && name.ends_with(".sqlite")
        })
        .collect();
    assert_eq!(files.len(), 1, "one database of {tenant}: {files:?}");
    files.into_iter().next().unwrap()
}

/// [`serve`] with its operator listener on a free 127.0.0.1 port too
/// (`--operator-listen`): the process, the API's base URL and the
/// operator's (`/metrics`, `/readyz`, `/report`).
pub fn serve_operated(
    data: &std::path::Path,
    configure: impl FnOnce(&mut Command),
) -> (Process, String, String) {
    let (process, api) = serve(data, |cmd| {
        cmd.args(["--operator-listen", "127.0.0.1:0"]);
        configure(cmd);
    });
    // Printed before the API's line.
    let log = process.log();
    let operator = log
        .lines()
        .filter(|l| l.contains("operator surfaces on http://"))
        .find_map(|l| l.split_whitespace().find(|w| w.starts_with("http://")))
        .unwrap_or_else(|| panic!("the operator's address; stderr:\n{log}"))
        .to_owned();
    (process, api, operator)
}

/// Asserts that no byte of `file` nor of its WAL holds any of `needles`
/// (ASCII case ignored): what an erasure must leave, in no table and in no
/// old page. Returns the main file's length (it was read).
pub fn assert_in_no_byte(file: &std::path::Path, needles: &[&str]) -> usize {
    let mut lengths = Vec::new();
    for suffix in ["", "-wal"] {
        let path = format!("{}{suffix}", file.display());
        let bytes = std::fs::read(&path).unwrap_or_default();
        for needle in needles {
            let at = bytes
                .windows(needle.len())
                .position(|w| w.eq_ignore_ascii_case(needle.as_bytes()));
            assert!(at.is_none(), "{needle:?} in {path} at byte {at:?}");
        }
        lengths.push(bytes.len());
    }
    lengths[0]
}
