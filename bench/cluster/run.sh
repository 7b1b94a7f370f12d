#!/usr/bin/env bash
# Scale-out on a 3-master Redis Cluster (issue 13): `partitions = 6`, W = 1, 2, 3 `ankusa worker`
# processes draining the same pre-committed 1 KiB bodies (12 tenants) into one nginx sink.
# Prints one CSV line per W. Not part of CI. Everything runs on this machine, so the figures
# are for all processes sharing its cores (see BENCHMARKS.md).
#
# Environment (all optional): N=24000 rows per run, WORKERS="1 2 3", CONC=100 per worker,
# ANKUSA_BIN=target/release/ankusa, P=6.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../nginx-sink.sh
source "$here/../nginx-sink.sh"
repo="$(cd "$here/../.." && pwd)"
N="${N:-24000}"; WORKERS="${WORKERS:-1 2 3}"; CONC="${CONC:-100}"; P="${P:-6}"
ANKUSA_BIN="${ANKUSA_BIN:-$repo/target/release/ankusa}"
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"
die() { echo "run.sh: $*" >&2; exit 1; }
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
(( N % 1200 == 0 )) || die "N must be a multiple of 1200 (12 tenants × 100 bodies)"
[[ -x "$ANKUSA_BIN" ]] || die "no ankusa binary at $ANKUSA_BIN"
[[ -x "$NGINX" ]] || die "nginx not found (apt-get install nginx-light)"
tmp="$(mktemp -d /tmp/ankusa-cluster.XXXXXX)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# A cluster node's bus port is its port + 10000: both free, the port at most 55535.
node_port() {
  python3 -c '
import random, socket
def free(p):
    s = socket.socket()
    try: s.bind(("127.0.0.1", p)); return True
    except OSError: return False
    finally: s.close()
while True:
    p = random.randint(20000, 45000)
    if free(p) and free(p + 10000): print(p); break'
}

ports=()
for i in 1 2 3; do
  p="$(node_port)"; ports+=("$p"); mkdir -p "$tmp/r$p"
  redis-server --port "$p" --bind 127.0.0.1 --cluster-enabled yes --cluster-config-file "$tmp/r$p/nodes.conf" \
    --save '' --appendonly no --dir "$tmp/r$p" --logfile "$tmp/r$p/log" >/dev/null &
  pids+=($!)
done
for p in "${ports[@]}"; do for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.05; done; done
redis-cli --cluster create "${ports[@]/#/127.0.0.1:}" --cluster-replicas 0 --cluster-yes >/dev/null
for p in "${ports[@]}"; do for _ in $(seq 200); do redis-cli -p "$p" cluster info | grep -q cluster_state:ok && break; sleep 0.05; done; done
url="redis-cluster://127.0.0.1:${ports[0]}?node=127.0.0.1:${ports[1]}&node=127.0.0.1:${ports[2]}"

sport="$(free_port)"
nginx_sink_conf "$tmp/nginx" "$sport" "access_log off;"
"$NGINX" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" & pids+=($!)
wait_sink "$sport" || die "nginx did not start (see $tmp/nginx/error.log)"
python3 -c 'import json; b={"event":"bench","pad":""}; b["pad"]="x"*(1024-len(json.dumps(b,separators=(",",":")))); open("'"$tmp"'/body.json","w").write(json.dumps(b,separators=(",",":")))'
mkdir -p "$tmp/bodies"; for i in $(seq 100); do cp "$tmp/body.json" "$tmp/bodies/$i.json"; done
printf '{"sinks": [{"module": "http", "opts": {"url": "http://127.0.0.1:%s/hook"}}]}' "$sport" >"$tmp/source.json"
cfg="$tmp/ankusa.toml"
cat >"$cfg" <<EOF
instance = "cl"
partitions = $P
[redis]
url = "$url"
[admin]
listen = "127.0.0.1:0"
[dispatch]
concurrency = $CONC
sink_concurrency = $CONC
[http]
allow_cidrs = ["127.0.0.0/8"]
[history]
enabled = false
EOF
redis_cpu() { for p in "${ports[@]}"; do redis-cli -p "$p" info cpu; done | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'; }
log "cluster ${ports[*]}, nginx :$sport, N=$N, P=$P, workers: $WORKERS"
echo "workers,partitions,rows,deliveries_per_s,redis_cpu_us_per_row,load_avg_1m_at_start"
for w in $WORKERS; do
  for p in "${ports[@]}"; do redis-cli -p "$p" flushall >/dev/null; done
  for t in $(seq 0 11); do
    "$ANKUSA_BIN" -c "$cfg" source put "t$t" hooks "$tmp/source.json" >/dev/null
    "$ANKUSA_BIN" -c "$cfg" produce "t$t" hooks "$tmp/bodies" --repeat $((N / 1200)) >/dev/null
  done
  load="$(cut -d' ' -f1 /proc/loadavg)"; c0="$(redis_cpu)"; t0="$(date +%s.%N)"; wp=()
  for i in $(seq "$w"); do
    ANKUSA_LOG=warn "$ANKUSA_BIN" -c "$cfg" worker --name "w$i" >/dev/null 2>"$tmp/w$i.log" & wp+=($!); pids+=($!)
  done
  deadline=$((SECONDS + 600))
  until [[ "$("$ANKUSA_BIN" -c "$cfg" --json stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows_delivered"])')" -ge "$N" ]]; do
    (( SECONDS < deadline )) || die "not drained in 600 s (see $tmp/w*.log)"; sleep 0.1
  done
  t1="$(date +%s.%N)"; c1="$(redis_cpu)"
  for p in "${wp[@]}"; do kill "$p" 2>/dev/null || true; done; for p in "${wp[@]}"; do wait "$p" 2>/dev/null || true; done
  echo "$w,$P,$N,$(echo "$N / ($t1 - $t0)" | bc -l | xargs printf '%.0f'),$(echo "($c1 - $c0) * 1000000 / $N" | bc -l | xargs printf '%.1f'),$load"
done
