#!/usr/bin/env bash
# Runs weft-perf in two processes on this machine: a server listening on HOST:0, then a client connected to
# the port the server names; prints the client's output, then the server's, and exits 0 only when both
# sides exit 0.
#   tools/perf/two-process.sh [--host HOST] WEFT_PERF CONFIG [CLIENT ARGS...]
#   tools/perf/two-process.sh build/bin/weft-perf ofi:provider=tcp -o all -T both -n 200 --check
# HOST defaults to 127.0.0.1 (ofi meets over loopback whatever the provider; verbs needs the RDMA
# interface's address, e.g. 192.0.2.1 in the Soft-RoCE guest). Each side runs under `timeout`,
# $WEFT_PERF_TIMEOUT seconds (default 120).
set -u
host=127.0.0.1
if [ "${1:-}" = --host ]; then
  host=$2
  shift 2
fi
if [ $# -lt 2 ]; then
  echo "usage: $0 [--host HOST] WEFT_PERF CONFIG [CLIENT ARGS...]" >&2
  exit 2
fi
bin=$1
config=$2
shift 2
limit=${WEFT_PERF_TIMEOUT:-120}

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
: >"$dir/server"
case $host in *:*) [ "${host#[}" = "$host" ] && host="[$host]" ;; esac  # an IPv6 address goes in brackets
timeout "$limit" "$bin" --backend "$config" --listen "$host:0" >"$dir/server" 2>&1 &
server=$!

# The server's first line names the port once it listens.
port=
for _ in $(seq 3000); do
  port=$(sed -n 's/^weft-perf: listening on .*:\([0-9][0-9]*\)$/\1/p' "$dir/server")
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

timeout "$limit" "$bin" --backend "$config" --connect "$host:$port" "$@"
client_rc=$?
if [ $client_rc -ne 0 ]; then
  # A server whose client failed may wait for it until its own limits; give it 2 s to say why.
  for _ in $(seq 200); do kill -0 "$server" 2>/dev/null || break; sleep 0.01; done
  kill "$server" 2>/dev/null
fi
wait "$server"
server_rc=$?
sed 's/^/  server: /' "$dir/server" >&2
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ]; then
  why() { [ "$1" -eq 124 ] && echo "124, killed after ${limit} s" || echo "$1"; }
  echo "two-process.sh: FAILED: client exit $(why $client_rc), server exit $(why $server_rc)" >&2
  exit 1
fi
