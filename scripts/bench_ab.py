#!/usr/bin/env python3
# Interleaved toki bench runs of several binaries or settings, with medians:
#   scripts/bench_ab.py N ROUNDS label=BINARY[:ENV=V,ENV=V] ...
# Each run: BINARY bench --deliveries N --workers 8 --json --data-dir (a fresh temp dir)
# plus $BENCH_ARGS (e.g. BENCH_ARGS="--channel mail").
# A variant's ENV may hold ARGS=a+b+c (more arguments for it alone, + for
# spaces), BEFORE=command (run through the shell before each of its runs)
# and BIN=path (another binary); "{run}" in a value becomes a name unique to
# the run.
import json, os, subprocess, sys, statistics, tempfile, shutil
import variants as variants_arg
n, rounds = int(sys.argv[1]), int(sys.argv[2])
variants = variants_arg.parse(sys.argv[3:])
res = {v[0]: [] for v in variants}
for r in range(rounds):
    for label, binary, env in variants:
        d = tempfile.mkdtemp(prefix="ab")
        run_id = f"r{os.getpid()}x{r}{label}"
        e = dict(os.environ); e.update({k: v.replace("{run}", run_id) for k, v in env.items()})
        extra = os.environ.get("BENCH_ARGS", "").split() + [a for a in e.pop("ARGS", "").split("+") if a]
        before = e.pop("BEFORE", "")
        binary = e.pop("BIN", binary)
        if before:
            subprocess.run(before, shell=True, check=True, env=e)
        out = subprocess.run([binary, "bench", "--deliveries", str(n), "--workers", "8", "--json", "--data-dir", d] + extra,
                             env=e, capture_output=True, text=True)
        shutil.rmtree(d, ignore_errors=True)
        try:
            j = json.loads(out.stdout.strip().splitlines()[-1])
            j = j[0] if isinstance(j, list) else j
        except Exception:
            print("FAILED", label, out.stdout[-500:], out.stderr[-2000:]); continue
        l = j["lateness_ms"]
        sessions = j.get("smtp_sessions")
        row = (l["p50"], l["p99"], l["max"], j["cpu_s"], j["peak_rss_mb"], j["missing"], j["duplicates"], sessions if sessions is not None else -1, j.get("sink_cpu_s", -1))
        res[label].append(row)
        print(f"round {r+1} {label:>10}: p50 {row[0]} p99 {row[1]} max {row[2]} cpu {row[3]} rss {row[4]} miss {row[5]} dup {row[6]} sessions {sessions} sink cpu {row[8]} registration {j['enqueue_s']:.1f} s", flush=True)
print("| variant | runs | p50 ms | p99 ms | worst p99 ms | max ms | CPU s | sink CPU s | RSS MB | missing | dup | SMTP sessions |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for label, rows in res.items():
    if not rows: continue
    med = lambda i: statistics.median(r[i] for r in rows)
    sess = "-" if med(7) < 0 else f"{med(7):g}"
    sink = "-" if med(8) < 0 else f"{med(8):.2f}"
    print(f"| {label} | {len(rows)} | {med(0):g} | {med(1):g} | {max(r[1] for r in rows)} | {med(2):g} | {med(3):.2f} | {sink} | {med(4):.1f} | {sum(r[5] for r in rows)} | {sum(r[6] for r in rows)} | {sess} |")
