#!/usr/bin/env bash
# Runs a weft example or tool in two processes on this machine: a server listening on HOST:0, then a client
# connected to the port the server names; prints the client's output, then the server's on stderr, and exits 0 only
# when both sides exit 0. The program must take --backend CONFIG, --listen HOST:PORT and --connect
# HOST:PORT, and print "NAME: listening on HOST:PORT" first (NAME: the program's file name).
#   tools/two-process.sh [--host HOST] [--timeout S] [--both ARG]... PROGRAM CONFIG [CLIENT ARGS...]
#   tools/two-process.sh --both --clients --both 4 build/bin/weft-kv ofi:provider=tcp --ops 2000
# HOST defaults to 127.0.0.1 (ofi meets over loopback whatever the provider; verbs needs the RDMA
# interface's address, e.g. 192.0.2.1 in the Soft-RoCE guest). Each --both ARG goes to both sides. Each
# side runs under `timeout`, S seconds (default 60). The wrappers examples/pingpong/two-process.sh,
# examples/kv/two-process.sh and tools/perf/two-process.sh name their program and their own timeout.
set -u
host=127.0.0.1
limit=60
both=()
while [ $# -gt 0 ]; do
  case $1 in
    --host) host=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --both) both+=("$2"); shift 2 ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "usage: $0 [--host HOST] [--timeout S] [--both ARG]... PROGRAM CONFIG [CLIENT ARGS...]" >&2
  exit 2
fi
bin=$1
config=$2
shift 2
name=$(basename "$bin")

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
: >"$dir/server"
case $host in *:*) [ "${host#[}" = "$host" ] && host="[$host]" ;; esac  # an IPv6 address goes in brackets
timeout "$limit" "$bin" --backend "$config" --listen "$host:0" "${both[@]}" >"$dir/server" 2>&1 &
server=$!

# The server's first line names the port once it listens: wait for it as long as the server may run.
port=
for _ in $(seq $((limit * 100))); do
  port=$(sed -n "s/^$name: listening on .*:\([0-9][0-9]*\)\$/\1/p" "$dir/server")
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || break
  sleep 0.01
done
if [ -z "$port" ]; then
  kill "$server" 2>/dev/null
  wait "$server"
  echo "two-process.sh: the server exited with $? before naming its port:" >&2
  sed 's/^/  server: /' "$dir/server" >&2
  exit 1
fi

timeout "$limit" "$bin" --backend "$config" --connect "$host:$port" "${both[@]}" "$@"
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
