#!/usr/bin/env bash
# Runs weft-kv in two processes on this machine: a server listening on HOST:0 for N clients, then a client
# process running N clients against the port the server names; prints the clients' lines, then the
# server's, and exits 0 only when both processes exit 0.
#   examples/kv/two-process.sh [--host HOST] [--clients N] KV CONFIG [CLIENT ARGS...]
#   examples/kv/two-process.sh build/bin/weft-kv ofi:provider=tcp --ops 2000
# HOST defaults to 127.0.0.1 (ofi meets over loopback whatever the provider; verbs needs the RDMA
# interface's address, e.g. 192.0.2.1 in the Soft-RoCE guest); N defaults to 4. Each process runs under
# `timeout`, $WEFT_KV_TIMEOUT seconds (default 60).
set -u
host=127.0.0.1
clients=4
while [ $# -gt 0 ]; do
  case $1 in
    --host) host=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "usage: $0 [--host HOST] [--clients N] KV CONFIG [CLIENT ARGS...]" >&2
  exit 2
fi
bin=$1
config=$2
shift 2
limit=${WEFT_KV_TIMEOUT:-60}

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
: >"$dir/server"
case $host in *:*) [ "${host#[}" = "$host" ] && host="[$host]" ;; esac  # an IPv6 address goes in brackets
timeout "$limit" "$bin" --backend "$config" --listen "$host:0" --clients "$clients" >"$dir/server" 2>&1 &
server=$!

# The server's first line names the port once it listens.
port=
for _ in $(seq 1000); do
  port=$(sed -n 's/^weft-kv: listening on .*:\([0-9][0-9]*\)$/\1/p' "$dir/server")
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || break
  sleep 0.01
done
if [ -z "$port" ]; then
  wait "$server"
  echo "two-process.sh: the server exited with $? before naming its port:"
  sed 's/^/  server: /' "$dir/server"
  exit 1
fi

timeout "$limit" "$bin" --backend "$config" --connect "$host:$port" --clients "$clients" "$@"
client_rc=$?
if [ $client_rc -ne 0 ]; then
  # A server whose clients failed may wait for them until its own limits; give it 2 s to say why.
  for _ in $(seq 200); do kill -0 "$server" 2>/dev/null || break; sleep 0.01; done
  kill "$server" 2>/dev/null
fi
wait "$server"
server_rc=$?
sed 's/^/  server: /' "$dir/server"
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ]; then
  why() { [ "$1" -eq 124 ] && echo "124, killed after ${limit} s" || echo "$1"; }
  echo "two-process.sh: FAILED: clients exit $(why $client_rc), server exit $(why $server_rc)"
  exit 1
fi
