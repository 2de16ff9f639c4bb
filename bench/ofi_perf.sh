#!/usr/bin/env bash
# Prints weft-perf on the ofi backend beside raw libfabric (weft-bench-fi-anchor: the same fi_info, the same
# operations, memory layout and timing) on each host provider over loopback, measured in the same run, two
# processes each, every row with its ratio: RDMA write latency (one way, median) at 64 bytes and 4 KiB, and
# write bandwidth at 64 KiB and 1 MiB. Targets (docs/performance.md): weft <= 1.05x raw libfabric's latency
# and >= 0.95x its bandwidth.
#   bench/ofi_perf.sh BUILD_DIR [OUT_DIR]     # OUT_DIR: keep every run's JSON there (for tools/perf/plot.py)
set -uo pipefail
bin=$1/bin
out=${2:-}
here=$(dirname "$0")
lat_iters=1000
bw_iters=2000
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

anchor() {  # provider test sizes iters -> JSON lines in $tmp/anchor
  timeout 120 "$bin/weft-bench-fi-anchor" -p "$1" --listen 127.0.0.1:0 >"$tmp/server" 2>&1 &
  local server=$! port=
  for _ in $(seq 1000); do
    port=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\)$/\1/p' "$tmp/server")
    [ -n "$port" ] && break
    sleep 0.01
  done
  timeout 120 "$bin/weft-bench-fi-anchor" -p "$1" --connect "127.0.0.1:$port" -o write -T "$2" --sizes "$3" \
    -n "$4" --json >"$tmp/anchor" 2>/dev/null
  wait "$server" 2>/dev/null
}

weft() {  # provider test sizes iters -> JSON in $tmp/weft
  # shm does not check remote bounds and rights itself: weft refuses RMA on it unless the user accepts
  # that (docs/backends/ofi.md); raw libfabric has no such check either, so the comparison is like for like.
  local config="ofi:provider=$1"
  [ "$1" = shm ] && config="$config,unchecked_rma=on"
  WEFT_PERF_TIMEOUT=120 "$here/../tools/perf/two-process.sh" "$bin/weft-perf" "$config" \
    -o write -T "$2" --sizes "$3" -n "$4" --json --no-progress >"$tmp/weft" 2>/dev/null
}

value() {  # file size key
  grep "\"size\":$2," "$1" | sed -n "s/.*\"$3\":\([0-9.e+-]*\).*/\1/p" | head -1
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.e+-]+$/ && b ~ /^[0-9.e+-]+$/ && b > 0) printf "%.2fx", a / b; else print "n/a" }'; }

keep() {  # provider test
  [ -n "$out" ] || return 0
  mkdir -p "$out"
  local name=${1//;/-}
  cp "$tmp/anchor" "$out/fi-anchor.$name.$2.json"
  cp "$tmp/weft" "$out/weft-perf.$name.$2.json"
}

for provider in tcp shm "tcp;ofi_rxm"; do
  anchor "$provider" lat 64,4096 $lat_iters
  weft "$provider" lat 64,4096 $lat_iters
  keep "$provider" lat
  for size in 64 4096; do
    a=$(value "$tmp/anchor" $size t_typical_us) w=$(value "$tmp/weft" $size t_typical_us)
    printf 'ofi_perf: %-14s write lat %7s B  raw libfabric %9s us | weft %9s us (%s) | target <= 1.05x\n' \
           "$provider" $size "${a:-n/a}" "${w:-n/a}" "$(ratio "$w" "$a")"
  done
  anchor "$provider" bw 65536,1048576 $bw_iters
  weft "$provider" bw 65536,1048576 $bw_iters
  keep "$provider" bw
  for size in 65536 1048576; do
    a=$(value "$tmp/anchor" $size bw_mib_s) w=$(value "$tmp/weft" $size bw_mib_s)
    printf 'ofi_perf: %-14s write bw  %7s B  raw libfabric %9s MiB/s | weft %9s MiB/s (%s) | target >= 0.95x\n' \
           "$provider" $size "${a:-n/a}" "${w:-n/a}" "$(ratio "$w" "$a")"
  done
done
