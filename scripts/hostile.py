#!/usr/bin/env python3
"""A hostile tenant beside an honest one on `toki serve`: probe answer times, the honest tenant's lateness, peak memory.

Starts `toki serve` (embedded, a fresh data directory) from the binary given
and creates tenants `tenant-a` (hostile) and `tenant-b` (honest). Then:

1. A registers the costliest templates it can get accepted: a chat template
   in English whose loop is the longest the registration check accepts
   (found by bisection, each try a PUT), and one in Japanese that is cheap
   for the check's samples and costly for one title (the check cannot see
   it; at delivery it goes past its budget once, then its deliveries are
   undeliverable).
2. A registers A_USERS users (half English, half Japanese) and B registers
   B_USERS and a chat template of its own (so that its batch, too, is
   planned on the render threads); each has one meeting whose chat
   reminders fall due at the same instant, a lead ahead: A's titled for its
   costly branch.
3. A's probes (the same as tests/hostile.rs) run ROUNDS times, paced under
   the rate limit so each answer shows the probe's own cost, and go on
   across the instant; then 2,000 PUTs 32 at a time against the default
   quota.
4. The server stops; B's and A's delivery rows are read from their databases.

Prints Markdown tables: per probe, the status answered and the median and
slowest answer time; per tenant, deliveries and lateness (finished − due);
then the server's peak RSS. Usage:

    scripts/hostile.py [--toki target/release/toki] [--rounds 20] [--a-users 1000] [--b-users 100]
"""

import argparse
import concurrent.futures
import datetime
import json
import os
import re
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import http.client
import urllib.parse

BOMB = ("{% for a in range(100000) %}{% for b in range(100000) %}"
        "xxxxxxxxxx{% endfor %}{% endfor %}")
# Issue 59's template: 27.7 s of CPU at registration before work was charged.
RANGE_WALK = ("{% for i in range(1500) %}{% if 9999 in range(10000) %}{% endif %}"
              "{% endfor %}Hi {{ name }}")
BROADCAST = "<!channel> {{ title }}"
# The loop the bisection lengthens: a few instructions an iteration.
LOOP = "{{% for i in range({n}) %}}{{% if i > 99999 %}}{{{{ i }}}}{{% endif %}}{{% endfor %}}Hi {{{{ name }}}}, {{{{ title }}}} at {{{{ time }}}}"
# Cheap for the samples; for the title BOOM, a string searched in a loop
# over the body (no hook inside: only its CPU time stops it).
BOOM = "BOOM"
CONDITIONAL = ("{% if title == '" + BOOM + "' %}{% set b = body|e %}{% for c in body %}"
               + "{% if 'zq' in b %}{% endif %}" * 8 + "{% endfor %}{% endif %}{{ name }}: {{ title }}")


# Where each party's connections leave from (any 127.0.0.0/8 address reaches
# the server on 127.0.0.1): failed authentications are throttled per address,
# so the stranger guessing keys has its own, as tenants and strangers would.
A_ADDRESS, B_ADDRESS, STRANGER_ADDRESS = "127.0.0.1", "127.0.0.2", "127.0.0.3"


def call(method, url, key, body=None, raw=None, source=A_ADDRESS):
    """(status, seconds, parsed body or None) for one request from `source`."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    parts = urllib.parse.urlsplit(url)
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    started = time.perf_counter()
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30, source_address=(source, 0))
    try:
        conn.request(method, target, body=data, headers=headers)
        r = conn.getresponse()
        text, status = r.read(), r.status
    except (ConnectionError, http.client.HTTPException, OSError):
        return 0, time.perf_counter() - started, None  # cut off (an oversized body)
    finally:
        conn.close()
    took = time.perf_counter() - started
    try:
        return status, took, json.loads(text)
    except ValueError:
        return status, took, None


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
        ("template bomb", lambda: call("PUT", f"{a}/templates/chat/fr", key, {"text": BOMB})),
        ("range-walking template", lambda: call("PUT", f"{a}/templates/chat/de", key, {"text": RANGE_WALK})),
        ("broadcast mention", lambda: call("PUT", f"{a}/templates/slack/en", key, {"text": BROADCAST})),
        ("series from 1900", lambda: call("PUT", f"{a}/schedules/ancient", key, {
            "title": "Daily since 1900", "starts_at": "1900-01-01T09:00:00Z",
            "participants": [], "reminders": [], "recurrence": {"rrule": "FREQ=DAILY"}})),
        *[(f"never matching, {freq.lower()}", never(a, key, freq)) for freq in NEVER],
        ("listing in 9998", lambda: call(
            "GET", f"{a}/schedules/daily/occurrences?from=9998-01-01T00:00:00Z&to=9998-12-31T00:00:00Z", key)),
        ("8 MB body", lambda: call("PUT", f"{a}/schedules/huge", key, {"title": "x" * (8 << 20)})),
        ("JSON 100,000 deep", lambda: call(
            "PUT", f"{a}/users/deep", key, raw=("[" * 100_000 + "]" * 100_000).encode())),
        ("Slack channel id", lambda: call("PUT", f"{a}/users/channel", key, {
            "name": "A channel", "slack_user_id": "C024BE91L"})),
        ("keyless report", lambda: call("GET", f"{base}/report", None, source=STRANGER_ADDRESS)),
        ("keyless metrics", lambda: call("GET", f"{base}/metrics", None, source=STRANGER_ADDRESS)),
        ("wrong key", lambda: call("GET", f"{a}/users/a0", "toki_" + "0" * 48, source=STRANGER_ADDRESS)),
    ]


def serve(toki, data):
    """`toki serve` on free ports (the API, the operator's); the process and the API's base URL."""
    proc = subprocess.Popen([toki, "serve", "--listen", "127.0.0.1:0", "--operator-listen", "127.0.0.1:0",
                             "--data-dir", data],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        m = re.search(r"registrar API on (http://\S+)", line)
        if m:
            # Read the rest, so that the server never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, m.group(1)
    sys.exit("toki serve did not start")


def peak_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        kb = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
    return kb / 1024


class Pacer:
    """At most `rate` calls a second (under the default quota of 50)."""

    def __init__(self, rate=40):
        self.gap, self.next = 1 / rate, time.monotonic()

    def wait(self):
        now = time.monotonic()
        if now < self.next:
            time.sleep(self.next - now)
        self.next = max(now, self.next) + self.gap


def hardest_loop(a, key, pacer):
    """The longest loop the registration check accepts (bisection); its template."""
    low, high = 1, 10_000
    while low < high:
        mid = (low + high + 1) // 2
        pacer.wait()
        status, _, _ = call("PUT", f"{a}/templates/chat/en", key, {"text": LOOP.format(n=mid)})
        low, high = (mid, high) if status == 200 else (low, mid - 1)
        print(f"bisecting the longest accepted loop: {low}..{high}", file=sys.stderr, end="\r")
    pacer.wait()
    status, _, body = call("PUT", f"{a}/templates/chat/en", key, {"text": LOOP.format(n=low)})
    assert status == 200, (status, body)
    print(file=sys.stderr)
    return low


def register(base, tenant, key, users, title, body, due, pacer, source):
    """`users` users (half English, half Japanese) and one meeting of theirs, reminded by chat at `due`."""
    url = f"{base}/v1/tenants/{tenant}"
    ids = [f"{tenant[-1]}{i}" for i in range(users)]
    for n, uid in enumerate(ids):
        pacer.wait()
        status, _, b = call("PUT", f"{url}/users/{uid}", key, {
            "name": f"User {n}", "locale": "en" if n % 2 == 0 else "ja", "time_zone": "Asia/Tokyo"},
            source=source)
        assert status == 200, (tenant, status, b)
        if n % 50 == 0:
            print(f"{tenant}: {n}/{users} users", file=sys.stderr, end="\r")
    starts = due + datetime.timedelta(minutes=1)
    pacer.wait()
    status, _, b = call("PUT", f"{url}/schedules/meeting", key, {
        "title": title, "body": body, "starts_at": starts.isoformat().replace("+00:00", "Z"),
        "participants": ids, "reminders": [{"minutes_before": 1, "channels": ["chat"]}]},
        source=source)
    assert status == 200, (tenant, status, b)
    print(file=sys.stderr)


def deliveries(data, tenant):
    """(status → count, lateness in ms of the delivered) from the tenant's database."""
    control = sqlite3.connect(os.path.join(data, "control.sqlite"))
    (path,) = control.execute("SELECT database FROM tenants WHERE id = ?", (tenant,)).fetchone()
    db = sqlite3.connect(path if os.path.isabs(path) else os.path.join(data, path))
    counts = dict(db.execute("SELECT status, count(*) FROM deliveries GROUP BY status").fetchall())
    late = [r[0] for r in db.execute(
        "SELECT finished_at - due_at FROM deliveries WHERE status = 'delivered'")]
    return counts, sorted(late)


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * p / 100))]


def probe_rounds(base, key, rounds, until, pacer):
    """A's probes, `rounds` times and at least until `until`: (times, statuses) per probe."""
    times, statuses = {}, {}
    r = 0
    while r < rounds or datetime.datetime.now(datetime.timezone.utc) < until:
        for name, thunk in probes(base, key):
            pacer.wait()
            status, took, _ = thunk()
            times.setdefault(name, []).append(took)
            statuses.setdefault(name, set()).add(status)
        r += 1
        print(f"round {r}", file=sys.stderr, end="\r")
    print(file=sys.stderr)
    return times, statuses


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--toki", default="target/release/toki")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--a-users", type=int, default=1000)
    ap.add_argument("--b-users", type=int, default=100)
    ap.add_argument("--lead-s", type=int, default=20, help="from the meetings' registration to the instant")
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="toki-hostile-")
    keys = {}
    for t in ("tenant-a", "tenant-b"):
        out = subprocess.run([args.toki, "tenant", "create", t, "--data-dir", data],
                             check=True, capture_output=True, text=True)
        keys[t] = out.stdout.strip()
    proc, base = serve(args.toki, data)
    try:
        a, key = f"{base}/v1/tenants/tenant-a", keys["tenant-a"]
        pacer = Pacer()
        status, _, _ = call("PUT", f"{a}/schedules/daily", key, {
            "title": "Daily", "starts_at": "2027-01-04T09:00:00Z", "participants": [],
            "reminders": [], "recurrence": {"rrule": "FREQ=DAILY"}})
        assert status == 200, status
        loop = hardest_loop(a, key, pacer)
        pacer.wait()
        status, _, b = call("PUT", f"{a}/templates/chat/ja", key, {"text": CONDITIONAL})
        assert status == 200, (status, b)
        # The instant: after both tenants' registrations, a lead ahead.
        per_s = 40
        setup_s = (args.a_users + args.b_users) / per_s
        due = (datetime.datetime.now(datetime.timezone.utc)
               + datetime.timedelta(seconds=setup_s + args.lead_s)).replace(microsecond=0)
        register(base, "tenant-a", key, args.a_users, BOOM, "'" * 10_000, due, pacer, A_ADDRESS)
        # B has a template of its own too: its batch is planned on the render
        # threads beside A's, not on the worker.
        status, _, b = call("PUT", f"{base}/v1/tenants/tenant-b/templates/chat/en", keys["tenant-b"],
                            {"text": "{{ name }}: {{ title }} starts at {{ time }}"}, source=B_ADDRESS)
        assert status == 200, (status, b)
        register(base, "tenant-b", keys["tenant-b"], args.b_users, "All hands", "", due, Pacer(per_s),
                 B_ADDRESS)
        host, port = base.removeprefix("http://").rsplit(":", 1)
        slow = []
        for _ in range(200):
            s = socket.create_connection((host, int(port)))
            s.sendall(b"PUT /v1/tenants/tenant-a/users/slow HTTP/1.1\r\nHost: x\r\n")
            slow.append(s)
        times, statuses = probe_rounds(base, key, args.rounds, due + datetime.timedelta(seconds=10), pacer)
        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            storm = list(pool.map(lambda i: call("PUT", f"{a}/users/s{i}", key, {"name": "Storm"}),
                                  range(2000)))
        times["PUT storm (2,000, 32 at once)"] = [t for _, t, _ in storm]
        statuses["PUT storm (2,000, 32 at once)"] = {s for s, _, _ in storm}
        rss = peak_rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print(f"A's costliest accepted templates: a loop of {loop} (chat, en); "
          f"a search of a 10,000-character body for the title {BOOM} (chat, ja)\n")
    print("| probe | answered | p50 ms | max ms |")
    print("|---|---|---:|---:|")
    for name, ts in times.items():
        codes = ", ".join("413 (cut off mid-upload)" if s == 0 else str(s)
                          for s in sorted(statuses[name]))
        print(f"| {name} | {codes} | {statistics.median(ts) * 1e3:.1f} | {max(ts) * 1e3:.1f} |")
    print("\n| tenant | recipients | delivered | undeliverable | p50 ms | p99 ms | max ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for tenant, users in (("tenant-b", args.b_users), ("tenant-a", args.a_users)):
        counts, late = deliveries(data, tenant)
        print(f"| {tenant} | {users} | {counts.get('delivered', 0)} | {counts.get('undeliverable', 0)} "
              f"| {percentile(late, 50)} | {percentile(late, 99)} | {late[-1] if late else '-'} |")
    print(f"\npeak RSS of toki serve: {rss:.0f} MB")


if __name__ == "__main__":
    main()
