#!/usr/bin/env bash
# RELIABILITY.md's table: the fault suite (tests/faults.rs) with the issue's
# outage lengths for the outages (Slack down and the SMTP port closed 5 min, a
# tenant database down 2 min); the other faults at the suite's own lengths.
# Each test appends one JSON row to $TOKI_RELIABILITY_OUT; the rows are then
# rendered into RELIABILITY.md between its table markers.
#
#   scripts/reliability.sh                  # ~12 min
#   TOKI_FAULT_OUTAGE_S=20 TOKI_FAULT_DB_OUTAGE_S=20 scripts/reliability.sh   # a quick look
#
# Needs Postgres: $TOKI_TEST_DATABASE_URL, else the local server on 127.0.0.1:5432
# (the tenant database's test is ignored by plain `cargo test`; run here with
# --run-ignored all). The tests assert correctness only (nothing lost,
# duplicated, stale or early); the lateness columns are this script's
# measurement, compared with the table on record, never a pass/fail.
# TOKI_RELIABILITY_PASSES=long or =rest runs one of the two passes (rows append).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="$ROOT/target/reliability.jsonl"
mkdir -p target
[ "${TOKI_RELIABILITY_PASSES:-long,rest}" = rest ] || : >"$OUT"
export TOKI_RELIABILITY_OUT="$OUT"
export TOKI_FAULT_OUTAGE_S="${TOKI_FAULT_OUTAGE_S:-300}"
export TOKI_FAULT_DB_OUTAGE_S="${TOKI_FAULT_DB_OUTAGE_S:-120}"
export TOKI_TEST_DATABASE_URL="${TOKI_TEST_DATABASE_URL:-${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}}"
echo "long outages: Slack/SMTP ${TOKI_FAULT_OUTAGE_S} s, tenant database ${TOKI_FAULT_DB_OUTAGE_S} s; rows to $OUT"
# The long outages wait most of the time: they run side by side. The rest
# (a crash, bursts, skew) runs one at a time, at CI's lengths, so that their
# timings are not disturbed by each other.
FAULTS='test(/^faults::/)'
LONG='test(slack_down_then_back) | test(smtp_port_closed_then_open) | test(a_tenant_database_down)'
status=0
if [ "${TOKI_RELIABILITY_PASSES:-long,rest}" != rest ]; then
  cargo nextest run --test integration --no-fail-fast --run-ignored all --test-threads 3 -E "$FAULTS & ($LONG)" "$@" || status=$?
fi
if [ "${TOKI_RELIABILITY_PASSES:-long,rest}" != long ]; then
  env -u TOKI_FAULT_OUTAGE_S -u TOKI_FAULT_DB_OUTAGE_S \
    cargo nextest run --test integration --no-fail-fast --run-ignored all --test-threads 1 -E "$FAULTS & not ($LONG)" "$@" || status=$?
fi
python3 - "$OUT" RELIABILITY.md "$TOKI_FAULT_OUTAGE_S" "$TOKI_FAULT_DB_OUTAGE_S" <<'PY'
import json, sys, datetime
rows_path, doc_path, outage, db_outage = sys.argv[1:5]
rows = [json.loads(l) for l in open(rows_path) if l.strip()]
def ms(v):
    return f"{v:,}" if v else "0"
lines = [
    f"Measured {datetime.date.today().isoformat()}; the long outages: Slack down and SMTP port closed {outage} s, tenant database {db_outage} s; the other faults as the column says.",
    "",
    "| fault | injected | expected | lost | duplicated | stale | undeliverable | p50 late ms | max late ms | notes |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
]
for r in rows:
    lines.append("| {fault} | {injected} | {expected:,} | {lost} | {duplicated} | {stale} | {undeliverable} | {p50} | {mx} | {note} |".format(
        p50=ms(r["p50_late_ms"]), mx=ms(r["max_late_ms"]), **{k: r[k] for k in
        ("fault", "injected", "expected", "lost", "duplicated", "stale", "undeliverable", "note")}))
table = "\n".join(lines)
print(table)
begin, end = "<!-- reliability table: begin -->", "<!-- reliability table: end -->"
doc = open(doc_path).read()
if begin in doc and end in doc:
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    open(doc_path, "w").write(head + begin + "\n" + table + "\n" + end + tail)
    print(f"\n{doc_path} updated ({len(rows)} rows)")
PY
exit "$status"
