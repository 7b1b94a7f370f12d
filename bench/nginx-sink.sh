# Sourced by the bench scripts (bench/peers/run.sh, bench/cluster/run.sh): the C sink, one
# nginx worker answering `return 200` to everything, kept-alive connections never closed from
# its side (churn is the client's doing).
#
# nginx_sink_conf DIR PORT ACCESS_LOG → writes DIR/nginx.conf; ACCESS_LOG is the http block's
# access-log lines (e.g. `access_log off;`).
nginx_sink_conf() {
  local dir="$1" port="$2" access="$3"
  mkdir -p "$dir"
  cat >"$dir/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
  $access
  keepalive_requests 10000000;
  keepalive_timeout 300s;
  client_body_buffer_size 16k;
  server {
    listen 127.0.0.1:$port;
    location / { return 200; }
  }
}
EOF
}

# wait_sink PORT → returns once the sink answers a POST (5 s at most).
wait_sink() {
  for _ in $(seq 100); do
    curl -s -o /dev/null -X POST "http://127.0.0.1:$1/" && return 0; sleep 0.05
  done
  return 1
}
