#!/bin/sh
# The compose stack's demo producer: registers one source per tenant (deploy/demo-source.json:
# a healthy sink and a flaky one), then commits generated JSON hooks through the workers'
# ingest endpoint (POST /v1/hooks/<tenant>/<source>), round-robin over the workers, forever.
#   DEMO_TENANTS   tenants to produce for (default "acme globex initech")
#   DEMO_WORKERS   worker admin addresses (default "worker-1:9187 worker-2:9187 worker-3:9187")
#   DEMO_RATE      hooks per second per tenant, about (default 5)
#   DEMO_INGEST_TOKEN  bearer token of the workers' ingest endpoint (admin.ingest_token)
set -eu
tenants=${DEMO_TENANTS:-acme globex initech}
workers=${DEMO_WORKERS:-worker-1:9187 worker-2:9187 worker-3:9187}
rate=${DEMO_RATE:-5}
trap 'exit 0' TERM INT

for t in $tenants; do
  until ankusa source put "$t" orders /etc/ankusa/demo-source.json; do sleep 1; done
done

n=0
while :; do
  for t in $tenants; do
    i=0
    while [ "$i" -lt "$rate" ]; do
      n=$((n + 1)); i=$((i + 1))
      set -- $workers
      shift $((n % $#))
      w=$1
      body=$(printf '{"event":"order.created","tenant":"%s","order":%d,"at":"%s"}' "$t" "$n" "$(date -u +%Y-%m-%dT%H:%M:%SZ)")
      curl -fsS -o /dev/null -X POST -H 'content-type: application/json' -H "x-demo-seq: $n" \
        -H "authorization: Bearer ${DEMO_INGEST_TOKEN:-}" \
        --data "$body" "http://$w/v1/hooks/$t/orders" || echo "demo-producer: commit via $w failed" >&2
    done
  done
  sleep 1
done
