#!/usr/bin/env bash
# Runs CI (.ci/run) N times in a row, each on a fresh clone of this
# repository's HEAD in a temporary folder with a cold target directory, and
# prints a table: run, result, minutes. No retry: a failed run stays failed
# (its log is kept and named). Meant for a quiet machine.
#
#   scripts/ci_repeat.sh 5
#   CI_REPEAT_TARGET=DIR scripts/ci_repeat.sh 4   # every run builds into DIR
#     (a warm target: the dependencies are built once, the workspace's
#     crates again in each clone; for the runs after a cold one)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${1:-5}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/toki-ci-repeat.XXXXXX")"
HEAD="$(git -C "$ROOT" rev-parse --short HEAD)"
echo "CI $RUNS times on fresh clones of $HEAD in $WORK"
ROWS=()
FAILED=0
for i in $(seq 1 "$RUNS"); do
  dir="$WORK/run-$i"
  git clone --quiet --no-hardlinks "$ROOT" "$dir"
  git -C "$dir" checkout --quiet "$HEAD"
  start=$SECONDS
  if (cd "$dir" && ${CI_REPEAT_TARGET:+env CARGO_TARGET_DIR="$CI_REPEAT_TARGET"} bash .ci/run) >"$WORK/run-$i.log" 2>&1; then result=passed; else result=FAILED; FAILED=$((FAILED + 1)); fi
  took=$((SECONDS - start))
  ROWS+=("| $i | $result | $((took / 60)) min $((took % 60)) s |")
  echo "run $i: $result in $took s (log: $WORK/run-$i.log)"
  [ "$result" = passed ] && rm -rf "$dir"
done
echo
echo "| run | result | time |"
echo "| ---: | --- | ---: |"
printf '%s\n' "${ROWS[@]}"
[ "$FAILED" = 0 ]
