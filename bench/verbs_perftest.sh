#!/usr/bin/env bash
# Prints weft-perf beside perftest on the same RDMA device, measured in the same run, each row with its
# ratio: RDMA write bandwidth at 64 KiB (ib_write_bw), write latency at 2 bytes (ib_write_lat) and send
# latency at 2 bytes (ib_send_lat), against weft-perf on the native verbs backend and on libfabric's verbs
# provider, all in two processes on one device. Meant for the Soft-RoCE guest (tools/softroce/run-in-guest):
#   bench/verbs_perftest.sh BUILD_DIR [DEVICE IP GID_INDEX]     # defaults: rxe0 192.0.2.1 1
# Targets (docs/performance.md): weft >= 0.97x perftest's bandwidth and <= 1.03x its latency. perftest's
# MB/sec are MiB/s, as weft-perf's bw_mib_s; latencies are perftest's t_typical and weft-perf's
# t_typical_us (the median), one way.
set -uo pipefail
bin=$1/bin
dev=${2:-rxe0}
ip=${3:-192.0.2.1}
gid=${4:-1}
here=$(dirname "$0")
bw_iters=2000
lat_iters=1000
json=$(mktemp)
trap 'rm -f "$json"' EXIT

perftest() {  # tool size iters -> the client's result line's column: bw average (MB/s) or t_typical (us)
  local tool=$1 size=$2 iters=$3 col
  case $tool in ib_write_bw) col=4 ;; *) col=5 ;; esac
  timeout 120 "$tool" -d "$dev" -x "$gid" -F -s "$size" -n "$iters" >/dev/null 2>&1 &
  local server=$!
  sleep 1
  timeout 120 "$tool" -d "$dev" -x "$gid" -F -s "$size" -n "$iters" "$ip" 2>/dev/null |
    awk -v size="$size" -v col="$col" '$1 == size && NF >= col { print $col; exit }'
  wait "$server" 2>/dev/null
}

weft() {  # config op test size iters -> bw_mib_s or t_typical_us of the client
  WEFT_PERF_TIMEOUT=120 "$here/../tools/perf/two-process.sh" --host "$ip" "$bin/weft-perf" "$1" \
    -o "$2" -T "$3" -s "$4" -n "$5" --json --no-progress >"$json" 2>/dev/null
  local key=t_typical_us
  [ "$3" = bw ] && key=bw_mib_s
  sed -n "s/.*\"$key\":\([0-9.e+-]*\).*/\1/p" "$json" | head -1
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.e+-]+$/ && b ~ /^[0-9.e+-]+$/ && b > 0) printf "%.2fx", a / b; else print "n/a" }'; }

row() {  # label unit perftest_value native_value ofi_value target
  printf 'verbs_perftest: %-22s perftest %9s %s | weft verbs %9s %s (%s) | weft ofi:provider=verbs %9s %s (%s) | target %s\n' \
         "$1" "${3:-n/a}" "$2" "${4:-n/a}" "$2" "$(ratio "${4:-}" "${3:-}")" "${5:-n/a}" "$2" "$(ratio "${5:-}" "${3:-}")" "$6"
}

native=verbs:device=$dev,gid_index=$gid
ofi=ofi:provider=verbs,domain=$dev
row "write bw 64 KiB" MiB/s "$(perftest ib_write_bw 65536 $bw_iters)" \
    "$(weft "$native" write bw 65536 $bw_iters)" "$(weft "$ofi" write bw 65536 $bw_iters)" ">= 0.97x"
row "write lat 2 B" us "$(perftest ib_write_lat 2 $lat_iters)" \
    "$(weft "$native" write lat 2 $lat_iters)" "$(weft "$ofi" write lat 2 $lat_iters)" "<= 1.03x"
row "send lat 2 B" us "$(perftest ib_send_lat 2 $lat_iters)" \
    "$(weft "$native" send lat 2 $lat_iters)" "$(weft "$ofi" send lat 2 $lat_iters)" "<= 1.03x"
