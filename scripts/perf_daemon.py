#!/usr/bin/env python3
# The daemon's CPU samples of `toki bench` runs recorded under perf, by category:
#   perf record -F 1999 -e cpu-clock -o LABEL.N.data -- BIN bench --deliveries N ...
#   scripts/perf_daemon.py base=base.*.data head=head.*.data
# The daemon is the last `toki` process the bench execs. Prints samples per
# run by category, then split into the burst (100 ms bins with more than 30
# samples: the due instant, the intake) and the quiet time around it.
import collections, glob, re, subprocess, sys

def daemon_pid(data):
    out = subprocess.run(["perf", "script", "-i", data, "--show-task-events", "-F", "pid,tid,comm"],
                         capture_output=True, text=True).stdout
    return re.findall(r"PERF_RECORD_COMM exec: toki:(\d+)/", out)[-1]

def category(sym, dso):
    if dso.startswith("[kernel"):
        if "clear_page" in sym:
            return "kernel: zeroing fresh pages"
        if sym in ("finish_task_switch.isra.0", "_raw_spin_unlock_irqrestore", "_raw_spin_unlock_irq"):
            return "kernel: scheduling and wake-ups"
        return "kernel: other"
    if sym.startswith(("sqlite3", "btree", "pcache")) or "pager" in sym.lower():
        return "SQLite"
    if sym.startswith(("mi_", "_mi_")):
        return "mimalloc"
    if "libc" in dso:
        return "libc"
    return "Rust (and the rest)"

def samples(data):
    pid = daemon_pid(data)
    out = subprocess.run(["perf", "script", "-i", data, "-F", "pid,time,ip,sym,dso"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s*(\d+)\s+([\d.]+):\s+\S+\s+(.*)\s+\((.*)\)\s*$", line)
        if m and m.group(1) == pid:
            sym = re.sub(r"\+0x[0-9a-f]+$", "", m.group(3).strip())
            yield float(m.group(2)), sym, m.group(4).split("/")[-1]

results = {}
for spec in sys.argv[1:]:
    label, pattern = spec.split("=", 1)
    files = sorted(glob.glob(pattern))
    cats, split = collections.Counter(), collections.Counter()
    for f in files:
        rows = list(samples(f))
        bins = collections.Counter(int(t * 10) for t, _, _ in rows)
        for t, sym, dso in rows:
            cats[category(sym, dso)] += 1
            split["burst" if bins[int(t * 10)] > 30 else "quiet"] += 1
    results[label] = (len(files), cats, split)

labels = list(results)
print("| samples per run | " + " | ".join(f"{l} ({results[l][0]} runs)" for l in labels) + " |")
print("|---|" + "---:|" * len(labels))
names = sorted(set().union(*(r[1] for r in results.values())))
for name in names + ["all", "burst", "quiet"]:
    cells = []
    for l in labels:
        n, cats, split = results[l]
        v = sum(cats.values()) if name == "all" else split[name] if name in ("burst", "quiet") else cats[name]
        cells.append(f"{v / n:,.0f}")
    print(f"| {name} | " + " | ".join(cells) + " |")
