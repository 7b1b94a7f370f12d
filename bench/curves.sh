#!/usr/bin/env bash
# The curves of BENCHMARKS.md beyond concurrency (bench/peers/sweep.sh draws that one): one CSV
# per axis under bench/curves/<date>/ and one plot per axis in docs/img/bench-<axis>.svg.
#   body     BullMQ beside ankusa (history on, the default) for one body size per run
#            (bench/peers/run.sh, BODY_BYTES), concurrency 100
#   sinks    ankusa (history on) with k http sink entries per hook (run.sh, SINKS)
#   tenants  `ankusa bench` with its backlog split over k tenants (history on)
#   workers  1, 2, 3 `ankusa worker` processes on a 3-master Redis Cluster (bench/cluster/run.sh)
# Not part of CI: it wants a quiet machine (~20 minutes with the defaults).
#
# Environment (all optional):
#   AXES="body sinks tenants workers"   which curves
#   ANKUSA_BIN=target/release/ankusa
#   RUNS=1                              runs per point (run.sh; read the shape, not the digits)
#   BODIES="256 1024 4096 16384 65536 262144"   SINK_COUNTS="1 2 4 8"
#   TENANT_COUNTS="1 10 100 1000 10000"         TENANT_ROWS=20000
#   OUT_DIR=bench/curves/<date>   PLOTS=docs/img ('' none)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/.." && pwd)"
AXES="${AXES:-body sinks tenants workers}"
export ANKUSA_BIN="${ANKUSA_BIN:-$repo/target/release/ankusa}"
export RUNS="${RUNS:-1}"
BODIES="${BODIES:-256 1024 4096 16384 65536 262144}"
SINK_COUNTS="${SINK_COUNTS:-1 2 4 8}"
TENANT_COUNTS="${TENANT_COUNTS:-1 10 100 1000 10000}"
TENANT_ROWS="${TENANT_ROWS:-20000}"
OUT_DIR="${OUT_DIR:-$here/curves/$(date -u +%Y-%m-%d)}"
PLOTS="${PLOTS-$repo/docs/img}"
[[ -x "$ANKUSA_BIN" ]] || { echo "curves.sh: no ankusa binary at $ANKUSA_BIN" >&2; exit 1; }
tmp="$(mktemp -d /tmp/ankusa-curves.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$OUT_DIR"
log() { echo "[$(date -u +%H:%M:%S)] curves: $*" >&2; }
rev="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"

# run.sh lines of several invocations into one CSV (one header).
merge() { # $1 out, then the CSVs
  local out="$1"; shift
  head -1 "$1" >"$out"
  for f in "$@"; do tail -n +2 "$f" >>"$out"; done
}

plot() { # $1 axis, $2 csv, $3 command shown on the plot
  [[ -n "$PLOTS" ]] || return 0
  python3 "$here/plot.py" "$1" "$2" "$PLOTS/bench-$1.svg" --command "$3" --commit "$rev"
}

for axis in $AXES; do
  case "$axis" in
    body)
      files=()
      for b in $BODIES; do
        # About 50 MB of bodies per run (Redis holds the backlog), 1 000 to 20 000 hooks.
        n=$(( 50000000 / b / 100 * 100 )); (( n > 20000 )) && n=20000; (( n < 1000 )) && n=1000
        log "body $b B, N=$n"
        N="$n" BODY_BYTES="$b" CONC=100 ANKUSA_CONC2="" HISTORY=true SYSTEMS="bullmq ankusa" \
          OUT="$tmp/body-$b.csv" "$here/peers/run.sh"
        files+=("$tmp/body-$b.csv")
      done
      merge "$OUT_DIR/body.csv" "${files[@]}"
      plot body "$OUT_DIR/body.csv" "bench/curves.sh (AXES=body BODIES=\"$BODIES\" RUNS=$RUNS)"
      ;;
    sinks)
      files=()
      for k in $SINK_COUNTS; do
        log "sinks $k"
        N=10000 SINKS="$k" CONC=100 ANKUSA_CONC2="" HISTORY=true SYSTEMS="ankusa" \
          OUT="$tmp/sinks-$k.csv" "$here/peers/run.sh"
        files+=("$tmp/sinks-$k.csv")
      done
      merge "$OUT_DIR/sinks.csv" "${files[@]}"
      plot sinks "$OUT_DIR/sinks.csv" "bench/curves.sh (AXES=sinks SINK_COUNTS=\"$SINK_COUNTS\" RUNS=$RUNS)"
      ;;
    tenants)
      echo "tenants,rows,deliveries_per_s,redis_cpu_us_per_row,redis_cmds_per_row,load_avg_1m_at_start" \
        >"$OUT_DIR/tenants.csv"
      for k in $TENANT_COUNTS; do
        log "tenants $k"
        load="$(cut -d' ' -f1 /proc/loadavg)"
        "$ANKUSA_BIN" bench --rows "$TENANT_ROWS" --tenants "$k" --dead-backlog 0 --fairness-backlog 0 \
          --isolation-rows 0 --lanes 0 --latency-secs 1 --json >"$tmp/tenants-$k.json"
        python3 - "$k" "$load" "$tmp/tenants-$k.json" >>"$OUT_DIR/tenants.csv" <<'EOF'
import json, sys
k, load, path = sys.argv[1:]
r = json.load(open(path))
print(f'{k},{r["rows"]},{r["deliveries_per_sec"]:.0f},{r["redis_cpu_us_per_row"]:.1f},'
      f'{r["redis_commands_per_row"]:.2f},{load}')
EOF
      done
      plot tenants "$OUT_DIR/tenants.csv" \
        "ankusa bench --rows $TENANT_ROWS --tenants K … (bench/curves.sh AXES=tenants)"
      ;;
    workers)
      log "workers 1 2 3 on a 3-master cluster"
      "$here/cluster/run.sh" >"$OUT_DIR/workers.csv"
      plot workers "$OUT_DIR/workers.csv" "bench/cluster/run.sh (bench/curves.sh AXES=workers)"
      ;;
    *) echo "curves.sh: unknown axis $axis (body sinks tenants workers)" >&2; exit 2 ;;
  esac
done
log "wrote $OUT_DIR"
