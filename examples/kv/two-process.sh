#!/usr/bin/env bash
# Runs weft-kv in two processes on this machine (tools/two-process.sh): a server listening on HOST:0 for N
# clients, then a client process running N clients against the port the server names; exits 0 only when
# both processes exit 0.
#   examples/kv/two-process.sh [--host HOST] [--clients N] KV CONFIG [CLIENT ARGS...]
#   examples/kv/two-process.sh build/bin/weft-kv ofi:provider=tcp --ops 2000
# HOST defaults to 127.0.0.1 (verbs needs the RDMA interface's address, e.g. 192.0.2.1 in the Soft-RoCE
# guest); N defaults to 4. Each process runs under `timeout`, $WEFT_KV_TIMEOUT seconds (default 60).
args=()
clients=4
while [ $# -gt 0 ]; do
  case $1 in
    --host) args+=(--host "$2"); shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    *) break ;;
  esac
done
exec "$(dirname "$0")/../../tools/two-process.sh" --timeout "${WEFT_KV_TIMEOUT:-60}" "${args[@]}" \
  --both --clients --both "$clients" "$@"
