#!/usr/bin/env bash
# Side by side: BullMQ and `ankusa worker` draining the same pre-committed 1 KiB bodies into
# the same nginx sink, against one private Redis, alternately, RUNS runs each. Writes a CSV.
# See bench/peers/README.md. Not part of CI.
#
# Environment (all optional):
#   N=50000            jobs/hooks pre-committed per run
#   RUNS=3             runs per system
#   CONC=100           concurrency of BullMQ and of the first ankusa system
#   ANKUSA_CONC2=256   concurrency of the second ankusa system (empty: skip it)
#   ANKUSA_BIN=…       the ankusa binary (default: target/release/ankusa of this checkout)
#   ANKUSA_BASE_BIN=…  another ankusa binary (e.g. a build of the commit before a change), run
#                      as systems `base` (at CONC) and `base2` (at ANKUSA_CONC2): before/after
#                      in the same invocation
#   BODY_BYTES=1024    the size of the one JSON body every hook/job carries (≥ 32)
#   SINKS=1            http sink entries per hook (ankusa only; all to the same nginx): the
#                      rows per run are N × SINKS, and every per-row figure is per row
#   HISTORY=false      history.enabled of the ankusa worker (BullMQ keeps nothing either; not
#                      ANKUSA_*: the worker would read that as its config)
#   LOG_URL=postgres://…  the delivery log's database for system `logged`: ankusa at CONC
#                      with [log] url (history kept in PostgreSQL, not Redis); its run also
#                      reports log_tail_s, how long after the drain the archiver emptied
#                      the log stream. System `logged0`: the same with log.keep_bodies = 0
#                      (no bodies kept for resend), to price the bodies
#   SYSTEMS="bullmq ankusa ankusa2"   which systems, in the order they alternate
#   OUT=bench/peers/results/<date>.csv
#   PERF=1             also `perf record -g` the ankusa worker of run 1 (perf-<system>.data)
#   PERF_OPTS="-g"     perf record options (e.g. "--call-graph dwarf -F 500")
#   KEEP=1             keep the temp dir (logs, nginx access logs)
#   CMDSTATS=1         also write, for run 1 of each system, the drain's Redis commands per
#                      delivered row and their Redis CPU per row, by command (`INFO
#                      commandstats`, which counts the commands scripts run too), to
#                      <OUT without .csv>-cmdstats-<system>.csv
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../nginx-sink.sh
source "$here/../nginx-sink.sh"
repo="$(cd "$here/../.." && pwd)"
N="${N:-50000}"
RUNS="${RUNS:-3}"
CONC="${CONC:-100}"
ANKUSA_CONC2="${ANKUSA_CONC2-256}"
ANKUSA_BIN="${ANKUSA_BIN:-$repo/target/release/ankusa}"
HISTORY="${HISTORY:-false}"
BODY_BYTES="${BODY_BYTES:-1024}"
SINKS="${SINKS:-1}"
ROWS=$((N * SINKS))
SYSTEMS="${SYSTEMS:-bullmq ankusa${ANKUSA_CONC2:+ ankusa2}}"
OUT="${OUT:-$here/results/$(date -u +%Y%m%dT%H%M%SZ).csv}"
HZ="$(getconf CLK_TCK)"

die() { echo "run.sh: $*" >&2; exit 1; }
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

(( N % 100 == 0 )) || die "N must be a multiple of 100 (both producers commit 100 per call)"
(( BODY_BYTES >= 32 )) || die "BODY_BYTES must be at least 32"
(( SINKS >= 1 )) || die "SINKS must be at least 1"
[[ "$SINKS" == 1 || " $SYSTEMS " != *" bullmq "* ]] || die "SINKS > 1 is ankusa only (a BullMQ job has one target)"
[[ -x "$ANKUSA_BIN" ]] || die "no ankusa binary at $ANKUSA_BIN (cargo build --release, or set ANKUSA_BIN)"
command -v redis-server >/dev/null || die "redis-server not found"
command -v node >/dev/null || die "node not found"
if ! command -v nginx >/dev/null && [[ ! -x /usr/sbin/nginx ]]; then
  log "installing nginx-light"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light >/dev/null; }
  # The package starts a system nginx on :80; this harness runs its own.
  (systemctl stop nginx || service nginx stop || nginx -s stop) >/dev/null 2>&1 || true
fi
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"
[[ -d "$here/node_modules/bullmq" ]] || (cd "$here" && npm ci --no-audit --no-fund >&2)

tmp="$(mktemp -d /tmp/ankusa-peers.XXXXXX)"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  [[ -n "${KEEP:-}" ]] && log "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

# --- Redis -------------------------------------------------------------------------------
rport="$(free_port)"
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
  --logfile "$tmp/redis.log" >/dev/null &
pids+=($!)
rc() { redis-cli -p "$rport" "$@"; }
for _ in $(seq 100); do rc ping >/dev/null 2>&1 && break; sleep 0.05; done
rc ping >/dev/null || die "redis-server did not start (see $tmp/redis.log)"

# --- nginx sink ----------------------------------------------------------------------------
sport="$(free_port)"
# \$connection is nginx's serial number of the TCP connection: distinct values = opened.
nginx_sink_conf "$tmp/nginx" "$sport" "log_format peers '\$msec \$connection \$connection_requests \$status';
  access_log $tmp/nginx/access.log peers buffer=256k flush=200ms;"
"$NGINX" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" &
pids+=($!)
nginx_pid=$!
wait_sink "$sport" || die "nginx did not start (see $tmp/nginx/error.log)"
sink="http://127.0.0.1:$sport/hook"
log "redis :$rport, nginx :$sport, tmp $tmp"

# --- the body: one JSON object of exactly BODY_BYTES bytes ---------------------------------
node -e 'const n=Number(process.argv[1]);const b={event:"bench",pad:""};b.pad="x".repeat(n-JSON.stringify(b).length);process.stdout.write(JSON.stringify(b))' "$BODY_BYTES" >"$tmp/body.json"
[[ "$(wc -c <"$tmp/body.json")" -eq "$BODY_BYTES" ]] || die "body is not $BODY_BYTES bytes"
mkdir -p "$tmp/bodies"
for i in $(seq 100); do cp "$tmp/body.json" "$tmp/bodies/$i.json"; done

# --- measurements ----------------------------------------------------------------------------
redis_cpu() { rc info cpu | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'; }
redis_calls() { rc info commandstats | awk -F'[=,:]' '/^cmdstat_/ {s += $3} END {print s}'; }
cmdstats() { rc info commandstats | awk -F'[=,:]' '/^cmdstat_/ {sub("cmdstat_", "", $1); print $1, $3, $5}'; }
# $1 before, $2 after (cmdstats output), $3 rows → "command,calls_per_row,usec_per_row", busiest first
cmdstats_delta() {
  awk -v n="$3" 'FILENAME == ARGV[1] {c[$1] = $2; u[$1] = $3; next}
    {dc = $2 - c[$1]; du = $3 - u[$1]; if (dc > 0) printf "%s,%.3f,%.2f\n", $1, dc / n, du / n}' "$1" "$2" \
    | sort -t, -k3 -g -r
}
proc_cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# The sink's access log is cut per run by byte offset (no reopen: nginx's workers run as
# another user and could not reopen files in our private temp dir).
log_size() { stat -c %s "$tmp/nginx/access.log"; }
cut_log() { # $1 name, $2 offset at the start of the run → prints the run's log file
  local to="$tmp/nginx/access-$1.log"
  sleep 0.5 # the access log's flush interval is 200 ms
  tail -c +$(($2 + 1)) "$tmp/nginx/access.log" >"$to"
  echo "$to"
}

ankusa_config() { # $1 concurrency, $2 "log" for the delivery log → config path
  local f="$tmp/ankusa-$1${2:+-$2}.toml"
  cat >"$f" <<EOF
instance = "peers"
[redis]
url = "redis://127.0.0.1:$rport"
[admin]
listen = "127.0.0.1:0"
[dispatch]
concurrency = $1
sink_concurrency = $1
[http]
allow_cidrs = ["127.0.0.0/8"]
[history]
enabled = $HISTORY
EOF
  if [[ "${2:-}" == log* ]]; then
    printf '[log]\nurl = "%s"\n' "${LOG_URL:?system logged needs LOG_URL}" >>"$f"
  fi
  if [[ "${2:-}" == log0 ]]; then
    printf 'keep_bodies = 0\n' >>"$f"
  fi
  echo "$f"
}

mkdir -p "$(dirname "$OUT")"
echo "system,concurrency,run,rows,deliveries_per_s,worker_cpu_us_per_delivery,redis_cpu_us_per_row,redis_commit_cpu_us_per_row,redis_cmds_per_row,redis_commit_cmds_per_row,sink_connections_opened,load_avg_1m_at_start,body_bytes,sinks,log_tail_s" >"$OUT"

# One run of one system: commit N, drain them, append a CSV line.
run_one() {
  local system="$1" run="$2" conc cfg wpid done_file="$tmp/done" load c0 c1 k0 k1 t0 t1 w
  case "$system" in
    bullmq) conc="$CONC" ;;
    ankusa) conc="$CONC" ;;
    ankusa2) conc="$ANKUSA_CONC2" ;;
    base) conc="$CONC" ;;
    logged) conc="$CONC" ;;
    logged0) conc="$CONC" ;;
    base2) conc="$ANKUSA_CONC2" ;;
    *) die "unknown system $system" ;;
  esac
  local bin="$ANKUSA_BIN"
  if [[ "$system" == base* ]]; then
    bin="${ANKUSA_BASE_BIN:?system $system needs ANKUSA_BASE_BIN}"
  fi
  rc flushall >/dev/null
  rm -f "$done_file"
  load="$(cut -d' ' -f1 /proc/loadavg)"
  local off; sleep 0.5; off="$(log_size)"
  # commit
  c0="$(redis_cpu)"; k0="$(redis_calls)"
  if [[ "$system" == bullmq ]]; then
    node "$here/produce.js" "$rport" "$N" "$tmp/body.json"
  else
    local logmode=""
    [[ "$system" == logged ]] && logmode=log
    [[ "$system" == logged0 ]] && logmode=log0
    cfg="$(ankusa_config "$conc" "$logmode")"
    local entries="" k
    for ((k = 0; k < SINKS; k++)); do
      entries+="${entries:+, }{\"module\": \"http\", \"opts\": {\"url\": \"$sink\"}}"
    done
    printf '{"sinks": [%s]}' "$entries" >"$tmp/source.json"
    "$bin" -c "$cfg" source put bench hooks "$tmp/source.json" >/dev/null
    "$bin" -c "$cfg" produce bench hooks "$tmp/bodies" --repeat $((N / 100)) >/dev/null
  fi
  c1="$(redis_cpu)"; k1="$(redis_calls)"
  local commit_cpu commit_cmds
  commit_cpu="$(echo "($c1 - $c0) * 1000000 / $ROWS" | bc -l)"
  commit_cmds="$(echo "($k1 - $k0) / $ROWS" | bc -l)"
  # drain
  [[ -n "${CMDSTATS:-}" && "$run" == 1 ]] && cmdstats >"$tmp/cmdstats-0"
  c0="$(redis_cpu)"; k0="$(redis_calls)"
  if [[ "$system" == bullmq ]]; then
    node "$here/worker.js" "$rport" "$sink" "$conc" "$N" "$done_file" 2>"$tmp/$system-$run.log" &
    wpid=$!
  else
    ANKUSA_LOG=warn "$bin" -c "$cfg" worker 2>"$tmp/$system-$run.log" >/dev/null &
    wpid=$!
  fi
  pids+=("$wpid")
  local perf_pid=""
  if [[ -n "${PERF:-}" && "$system" != bullmq && "$run" == 1 ]]; then
    perf record ${PERF_OPTS:--g} -o "$(dirname "$OUT")/perf-$system.data" -p "$wpid" 2>/dev/null &
    perf_pid=$!
  fi
  local key="ankusa:{peers.p0}:stats" deadline=$((SECONDS + 600))
  while :; do
    if [[ "$system" == bullmq ]]; then
      [[ -e "$done_file" ]] && break
    else
      [[ "$(rc hget "$key" delivered)" -ge "$ROWS" ]] 2>/dev/null && break
    fi
    kill -0 "$wpid" 2>/dev/null || die "$system worker exited early: $(tail -5 "$tmp/$system-$run.log")"
    (( SECONDS < deadline )) || die "$system run $run did not drain $ROWS in 600 s"
    sleep 0.1
  done
  w="$(proc_cpu_ticks "$wpid")"
  c1="$(redis_cpu)"; k1="$(redis_calls)"
  local tail_s=""
  if [[ "$system" == logged* ]]; then
    local t_drained=$SECONDS
    while [[ "$(rc xlen "ankusa:{peers.p0}:log")" -gt 0 ]]; do
      (( SECONDS < deadline )) || die "the archiver did not empty the log stream"
      sleep 0.1
    done
    tail_s=$((SECONDS - t_drained))
  fi
  if [[ -n "${CMDSTATS:-}" && "$run" == 1 ]]; then
    cmdstats >"$tmp/cmdstats-1"
    { echo "command,calls_per_row,usec_per_row"; cmdstats_delta "$tmp/cmdstats-0" "$tmp/cmdstats-1" "$ROWS"; } \
      >"${OUT%.csv}-cmdstats-$system.csv"
  fi
  [[ -n "$perf_pid" ]] && { kill -INT "$perf_pid"; wait "$perf_pid" || true; }
  kill -TERM "$wpid"; wait "$wpid" 2>/dev/null || true
  local logf rate conns
  logf="$(cut_log "$system-$run" "$off")"
  # deliveries/s between the first and the last request the sink saw (startup excluded)
  rate="$(awk '$4 == 200 {n++; if (!f || $1 < f) f = $1; if ($1 > l) l = $1} END {printf "%.0f", (n - 1) / (l - f)}' "$logf")"
  conns="$(awk '{print $2}' "$logf" | sort -u | wc -l)"
  local got; got="$(awk '$4 == 200' "$logf" | wc -l)"
  (( got >= ROWS )) || die "$system run $run: the sink saw $got of $ROWS"
  printf '%s,%s,%s,%s,%s,%.1f,%.1f,%.1f,%.2f,%.2f,%s,%s,%s,%s,%s\n' "$system" "$conc" "$run" "$ROWS" "$rate" \
    "$(echo "$w * 1000000 / $HZ / $ROWS" | bc -l)" \
    "$(echo "($c1 - $c0) * 1000000 / $ROWS" | bc -l)" "$commit_cpu" \
    "$(echo "($k1 - $k0) / $ROWS" | bc -l)" "$commit_cmds" "$conns" "$load" "$BODY_BYTES" "$SINKS" "$tail_s" | tee -a "$OUT" >&2
}

log "N=$N runs=$RUNS systems=($SYSTEMS) ankusa=$ANKUSA_BIN history=$HISTORY body=$BODY_BYTES B sinks=$SINKS"
for run in $(seq "$RUNS"); do
  for system in $SYSTEMS; do
    log "run $run: $system"
    run_one "$system" "$run"
  done
done
log "wrote $OUT"
column -s, -t "$OUT" >&2 || cat "$OUT" >&2
