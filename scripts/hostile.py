#!/usr/bin/env python3
"""How long `toki serve` takes to refuse a hostile tenant's probes, and its peak memory.

Starts `toki serve` (embedded, a fresh data directory) from the binary given,
creates tenants `tenant-a` and `tenant-b`, sends tenant A's probes (the same as
tests/hostile.rs) ROUNDS times, and prints a Markdown table: per probe, the
status answered and the median and slowest answer time; then the server's
peak RSS. Usage:

    scripts/hostile.py [--toki target/release/toki] [--rounds 20]
"""

import argparse
import concurrent.futures
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

BOMB = ("{% for a in range(100000) %}{% for b in range(100000) %}"
        "xxxxxxxxxx{% endfor %}{% endfor %}")


def call(method, url, key, body=None, raw=None):
    """(status, seconds) for one request."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("authorization", f"Bearer {key}")
    req.add_header("content-type", "application/json")
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        e.read()
        status = e.code
    except (ConnectionError, urllib.error.URLError):
        status = 0  # the server closed the connection on an oversized body
    return status, time.perf_counter() - started


# Rules whose days never come (February 30th): the expander walks to its limit.
NEVER = ("YEARLY", "MONTHLY", "WEEKLY", "DAILY")


def never(a, key, freq):
    rule = f"FREQ={freq};BYMONTH=2;BYMONTHDAY=30"
    return lambda: call("PUT", f"{a}/schedules/never", key, {
        "title": "February 30th", "starts_at": "2027-01-04T09:00:00Z", "participants": [],
        "reminders": [], "recurrence": {"rrule": rule}})


def probes(base, key):
    """Each probe as (name, thunk)."""
    a = f"{base}/v1/tenants/tenant-a"
    return [
        ("template bomb", lambda: call("PUT", f"{a}/templates/chat/en", key, {"text": BOMB})),
        ("series from 1900", lambda: call("PUT", f"{a}/schedules/ancient", key, {
            "title": "Daily since 1900", "starts_at": "1900-01-01T09:00:00Z",
            "participants": [], "reminders": [], "recurrence": {"rrule": "FREQ=DAILY"}})),
        *[(f"never matching, {freq.lower()}", never(a, key, freq)) for freq in NEVER],
        ("listing in 9998", lambda: call(
            "GET", f"{a}/schedules/daily/occurrences?from=9998-01-01T00:00:00Z&to=9998-12-31T00:00:00Z", key)),
        ("8 MB body", lambda: call("PUT", f"{a}/schedules/huge", key, {"title": "x" * (8 << 20)})),
        ("JSON 100,000 deep", lambda: call(
            "PUT", f"{a}/users/deep", key, raw=("[" * 100_000 + "]" * 100_000).encode())),
        ("wrong key", lambda: call("GET", f"{a}/users/a0", "toki_" + "0" * 48)),
    ]


def serve(toki, data):
    """`toki serve` on a free port; the process and its base URL."""
    proc = subprocess.Popen([toki, "serve", "--listen", "127.0.0.1:0", "--data-dir", data],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        m = re.search(r"registrar API on (http://\S+)", line)
        if m:
            return proc, m.group(1)
    sys.exit("toki serve did not start")


def peak_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        kb = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
    return kb / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--toki", default="target/release/toki")
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="toki-hostile-")
    keys = {}
    for t in ("tenant-a", "tenant-b"):
        out = subprocess.run([args.toki, "tenant", "create", t, "--data-dir", data],
                             check=True, capture_output=True, text=True)
        keys[t] = out.stdout.strip()
    proc, base = serve(args.toki, data)
    try:
        a = keys["tenant-a"]
        status, _ = call("PUT", f"{base}/v1/tenants/tenant-a/schedules/daily", a, {
            "title": "Daily", "starts_at": "2027-01-04T09:00:00Z", "participants": [],
            "reminders": [], "recurrence": {"rrule": "FREQ=DAILY"}})
        assert status == 200, status
        host, port = base.removeprefix("http://").rsplit(":", 1)
        slow = []
        for _ in range(200):
            s = socket.create_connection((host, int(port)))
            s.sendall(b"PUT /v1/tenants/tenant-a/users/slow HTTP/1.1\r\nHost: x\r\n")
            slow.append(s)
        times, statuses = {}, {}
        for r in range(args.rounds):
            for name, thunk in probes(base, a):
                status, took = thunk()
                times.setdefault(name, []).append(took)
                statuses.setdefault(name, set()).add(status)
                time.sleep(0.025)  # within the default rate: each probe's own cost, not 429s
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr, end="\r")
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            storm = list(pool.map(lambda i: call("PUT", f"{base}/v1/tenants/tenant-a/users/s{i}", a,
                                                 {"name": "Storm"}), range(2000)))
        times["PUT storm (2,000, 32 at once)"] = [t for _, t in storm]
        statuses["PUT storm (2,000, 32 at once)"] = {s for s, _ in storm}
        print("| probe | answered | p50 ms | max ms |")
        print("|---|---|---:|---:|")
        for name, ts in times.items():
            codes = ", ".join("413 (cut off mid-upload)" if s == 0 else str(s)
                              for s in sorted(statuses[name]))
            print(f"| {name} | {codes} | {statistics.median(ts) * 1e3:.1f} | {max(ts) * 1e3:.1f} |")
        print(f"\npeak RSS of toki serve: {peak_rss_mb(proc.pid):.0f} MB")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
