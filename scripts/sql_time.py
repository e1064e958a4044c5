#!/usr/bin/env python3
# SQL time of a daemon by statement, from its log with sqlx's statement log on:
#   RUST_LOG=warn,sqlx::query=debug toki bench --deliveries 30000 --workers 8 --lead 15 --data-dir D
#   scripts/sql_time.py D/*/daemon-0.log [more logs: one column each]
# `elapsed` is the time SQLite's worker thread spent on the statement
# (including handing its rows over). Statements are grouped by their first
# and last characters, lists of placeholders folded.
import collections, re, sys

def totals(path):
    agg = collections.defaultdict(lambda: [0, 0.0, 0])
    pat = re.compile(r'db\.statement="(.*?)" rows_affected=\d+ rows_returned=(\d+) .*elapsed_secs=(\S+)')
    for line in open(path, errors="replace"):
        m = "sqlx::query" in line and pat.search(line)
        if not m:
            continue
        st = re.sub(r"\\n|\s+", " ", m.group(1)).strip()
        st = re.sub(r"\((\?|\$\d+)[^()]*(\)\s*,\s*\((\?|\$\d+)[^()]*)*\)", "(…)", st)
        st = st if len(st) <= 90 else st[:50] + " … " + st[-36:]
        a = agg[st]
        a[0] += 1
        a[1] += float(m.group(3))
        a[2] += int(m.group(2))
    return agg

runs = [(p, totals(p)) for p in sys.argv[1:]]
keys = sorted({k for _, a in runs for k in a}, key=lambda k: -max(a[k][1] for _, a in runs))
print("| statement | " + " | ".join(f"run {i + 1}: calls / ms / rows" for i in range(len(runs))) + " |")
print("|---|" + "---:|" * len(runs))
for k in keys[:12]:
    cells = [f"{a[k][0]} / {a[k][1] * 1000:.0f} / {a[k][2]}" if k in a else "—" for _, a in runs]
    print(f"| `{k}` | " + " | ".join(cells) + " |")
print("| all | " + " | ".join(f"{sum(v[0] for v in a.values())} / {sum(v[1] for v in a.values()) * 1000:.0f} / {sum(v[2] for v in a.values())}" for _, a in runs) + " |")
