#!/usr/bin/env python3
# The daemon's CPU while nothing is due, interleaved between builds:
#   scripts/idle_cpu.py SECONDS ROUNDS label=BINARY[:ENV=V,ENV=V] ...
# Each run: BINARY daemon --workers 8 --data-dir (a fresh temp dir) on the
# embedded backend, with a Slack channel configured (nothing is sent); once it
# has been up 3 s, its CPU (utime + stime from /proc) over SECONDS, per second.
import os, signal, statistics, subprocess, sys, tempfile, shutil, time
import variants as variants_arg

secs, rounds = float(sys.argv[1]), int(sys.argv[2])
variants = variants_arg.parse(sys.argv[3:])
hz = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / hz


res = {v[0]: [] for v in variants}
for r in range(rounds):
    for label, binary, env in variants:
        d = tempfile.mkdtemp(prefix="idle")
        e = dict(os.environ, TOKI_SLACK_TOKEN="xoxb-idle", TOKI_SLACK_API_URL="http://127.0.0.1:9/api")
        e.update(env)
        log = open(os.path.join(d, "daemon.log"), "w")
        p = subprocess.Popen([binary, "daemon", "--workers", "8", "--data-dir", d], env=e,
                             stdout=subprocess.DEVNULL, stderr=log)
        time.sleep(3)
        if p.poll() is not None:
            print("FAILED", label, open(os.path.join(d, "daemon.log")).read()[-2000:])
            continue
        start = cpu_s(p.pid)
        time.sleep(secs)
        used = cpu_s(p.pid) - start
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
        shutil.rmtree(d, ignore_errors=True)
        per_s = used / secs * 1000
        res[label].append(per_s)
        print(f"round {r+1} {label:>10}: {per_s:.1f} ms CPU per s", flush=True)
print("| variant | runs | daemon CPU while idle, ms per s (median) | min | max |")
print("|---|---:|---:|---:|---:|")
for label, rows in res.items():
    if rows:
        print(f"| {label} | {len(rows)} | {statistics.median(rows):.1f} | {min(rows):.1f} | {max(rows):.1f} |")
