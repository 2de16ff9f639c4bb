#!/usr/bin/env bash
# tests/compat/two_process.sh LIBDIR CONFIG PORT — unmodified rdma-core and perftest programs between two
# processes on the front end (docs/verbs-frontend.md, "Several processes"): ibv_rc_pingpong (LID route, GID
# route, completion channel, a large message) and perftest's ib_send_lat, ib_write_lat, ib_write_bw and
# ib_read_lat, each a server and a client on localhost, with WEFT_BACKEND=CONFIG and TCP ports from PORT up
# for their out-of-band exchange. Each pair must exit 0 on both sides, and the client must print its result
# (pingpong's "iters in", perftest's table row). Skipped, saying why, without the programs.
set -uo pipefail
libdir=$(cd "$1" && pwd)  # absolute: the programs run in a directory of their own
config=$2
port=$3

for p in ibv_rc_pingpong ib_send_lat ib_write_lat ib_write_bw ib_read_lat; do
  if ! command -v "$p" >/dev/null; then
    echo "SKIP: $p is not installed (apt-get install ibverbs-utils perftest)"
    exit 0
  fi
done

export LD_LIBRARY_PATH=$libdir
export WEFT_BACKEND=$config
# ofi's warnings say why a QP went to error (a failed handshake, a peer found gone) in a failure's output.
export WEFT_LOG=${WEFT_LOG:-"error;warn:ofi"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"  # where a crashing program leaves its dump
failed=0

# run NAME RESULT_REGEX PROGRAM ARGS...: the server, then the client (again while it cannot connect yet).
run() {
  local name=$1 result=$2
  shift 2
  timeout 120 "$@" -p "$port" >"$work/server" 2>&1 &
  local server=$!
  local rc=1 attempt
  for attempt in $(seq 1 100); do
    timeout 120 "$@" -p "$port" localhost >"$work/client" 2>&1
    rc=$?
    grep -q "Couldn't connect\|Unable to open file descriptor\|Connection refused" "$work/client" || break
    kill -0 "$server" 2>/dev/null || break
    sleep 0.1
  done
  wait "$server"
  local src=$?
  port=$((port + 1))
  if [ "$rc" -eq 0 ] && [ "$src" -eq 0 ] && grep -Eq "$result" "$work/client"; then
    echo "ok: $name: $(grep -E "$result" "$work/client" | tail -1 | tr -s ' \t' ' ')"
  else
    echo "FAILED: $name (client exit $rc, server exit $src)"
    echo "--- client"; cat "$work/client"
    echo "--- server"; cat "$work/server"
    failed=1
  fi
}

pingpong='iters in [0-9.]+ seconds'
table='^ *[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+'
run "ibv_rc_pingpong" "$pingpong" ibv_rc_pingpong -n 500
run "ibv_rc_pingpong -g 0 (GID route)" "$pingpong" ibv_rc_pingpong -n 500 -g 0
run "ibv_rc_pingpong -e (completion channel)" "$pingpong" ibv_rc_pingpong -n 500 -e
run "ibv_rc_pingpong -s 65536" "$pingpong" ibv_rc_pingpong -n 200 -s 65536
run "ib_send_lat" "$table" ib_send_lat -d weft_ofi0 -n 500
run "ib_write_lat" "$table" ib_write_lat -d weft_ofi0 -n 500
run "ib_write_bw" "$table" ib_write_bw -d weft_ofi0 -n 500
run "ib_read_lat" "$table" ib_read_lat -d weft_ofi0 -n 500
exit $failed
