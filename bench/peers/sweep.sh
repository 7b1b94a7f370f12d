#!/usr/bin/env bash
# The concurrency curve: `run.sh` once per concurrency, BullMQ beside `ankusa worker` with the
# attempt history on (the default config) and off, into one CSV, then `bench/plot.py` draws it.
# See bench/peers/README.md ("The curves"). Not part of CI.
#
# Environment (all optional; the rest is passed on to run.sh):
#   CONCS="1 4 16 64 100 256 512"   the concurrencies, in order
#   N=20000 RUNS=1                  per point (run.sh's knobs)
#   OUT=bench/peers/results/sweep-<date>.csv
#   PLOT=docs/img/bench-concurrency.svg   the plot ('' none)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
CONCS="${CONCS:-1 4 16 64 100 256 512}"
export N="${N:-20000}" RUNS="${RUNS:-1}"
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="${OUT:-$here/results/sweep-$stamp.csv}"
PLOT="${PLOT-$repo/docs/img/bench-concurrency.svg}"
tmp="$(mktemp -d /tmp/ankusa-sweep.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT

mkdir -p "$(dirname "$OUT")"
header=""
for c in $CONCS; do
  # One invocation per history setting: run.sh sets history.enabled for all its ankusa runs.
  # `ankusa` with history on is the default configuration; BullMQ runs once per point.
  CONC="$c" ANKUSA_CONC2="" HISTORY=true SYSTEMS="bullmq ankusa" OUT="$tmp/on-$c.csv" \
    "$here/run.sh"
  CONC="$c" ANKUSA_CONC2="" HISTORY=false SYSTEMS="ankusa" OUT="$tmp/off-$c.csv" \
    "$here/run.sh"
  if [[ -z "$header" ]]; then
    header="$(head -1 "$tmp/on-$c.csv")"
    echo "$header" >"$OUT"
  fi
  # The system column says which history setting an ankusa line ran with.
  tail -n +2 "$tmp/on-$c.csv" | sed 's/^ankusa,/ankusa history on,/' >>"$OUT"
  tail -n +2 "$tmp/off-$c.csv" | sed 's/^ankusa,/ankusa history off,/' >>"$OUT"
done
echo "sweep: wrote $OUT" >&2
if [[ -n "$PLOT" ]]; then
  python3 "$repo/bench/plot.py" concurrency "$OUT" "$PLOT" \
    --command "bench/peers/sweep.sh (CONCS=\"$CONCS\" N=$N RUNS=$RUNS)"
fi
