#!/usr/bin/env bash
# Prints weft-perf on the ofi backend beside raw libfabric (weft-bench-fi-anchor: the same fi_info, the same
# CQ wait object, operations, memory layout and timing) on each host provider over loopback, measured in the
# same run, two processes each, every row with its ratio: RDMA write latency (one way, median) at 64 bytes
# and 4 KiB, and write bandwidth at 64 KiB and 1 MiB, each the median of several alternating passes. Targets
# (docs/performance.md): weft <= 1.05x raw libfabric's latency and >= 0.95x its bandwidth.
#   bench/ofi_perf.sh BUILD_DIR [OUT_DIR]     # OUT_DIR: keep every run's JSON there (for tools/perf/plot.py)
set -uo pipefail
bin=$1/bin
out=${2:-}
here=$(dirname "$0")
# Loopback figures on a shared host drift by tens of percent within a minute: `passes` runs alternate the
# two programs, and each row is the median of the passes' ratios (WEFT_OFI_PERF_PASSES). A pass is 1,000
# round trips and 2,000 writes: well under a second each, the processes' start-up is most of its time.
passes=${WEFT_OFI_PERF_PASSES:-3}
lat_iters=1000
bw_iters=2000
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=bench/lib.sh
. "$here/lib.sh"

# The anchor's CQs get the wait object weft's get (FI_WAIT_FD but on shm; its default --cq-wait auto), which
# weft needs for CompletionQueue::wait() and fd() and which costs tcp about 0.6 us one way: without it the
# anchor would measure a CQ that cannot block against one that can (docs/performance.md).
anchor() {  # provider test sizes iters -> JSON lines in $tmp/anchor
  fi_anchor_pair 127.0.0.1 "-p $1" -o write -T "$2" --sizes "$3" -n "$4" --json >"$tmp/anchor"
}

weft() {  # provider test sizes iters -> JSON in $tmp/weft
  # shm does not check remote bounds and rights itself: weft refuses RMA on it unless the user accepts
  # that (docs/backends/ofi.md); raw libfabric has no such check either, so the comparison is like for like.
  local config="ofi:provider=$1"
  [ "$1" = shm ] && config="$config,unchecked_rma=on"
  # Bandwidth: every write signaled (-Q 1), as the anchor's: it refills its window on each completion, where
  # weft-perf's default of one signaled write in 100 refills it only every 100th, leaving 28 of 128 writes
  # in flight between (rxm at 64 KiB: about 0.7x the anchor so; docs/performance.md).
  local signal=()
  [ "$2" = bw ] && signal=(-Q 1)
  WEFT_PERF_TIMEOUT=120 "$here/../tools/perf/two-process.sh" "$bin/weft-perf" "$config" \
    -o write -T "$2" --sizes "$3" -n "$4" "${signal[@]}" --json --no-progress >"$tmp/weft" 2>/dev/null
}

value() {  # file size key
  grep "\"size\":$2," "$1" | sed -n "s/.*\"$3\":\([0-9.e+-]*\).*/\1/p" | head -1
}


keep() {  # provider test
  [ -n "$out" ] || return 0
  mkdir -p "$out"
  local name=${1//;/-}
  cp "$tmp/anchor" "$out/fi-anchor.$name.$2.json"
  cp "$tmp/weft" "$out/weft-perf.$name.$2.json"
}

# One pass of `test` for both programs, their order alternating with the pass number so that a drift of the
# host's speed during the run does not favour one side; each size's raw and weft figures go to $tmp/rows.
measure() {  # provider test sizes iters key pass
  if [ $(($6 % 2)) -eq 1 ]; then
    anchor "$1" "$2" "$3" "$4"; weft "$1" "$2" "$3" "$4"
  else
    weft "$1" "$2" "$3" "$4"; anchor "$1" "$2" "$3" "$4"
  fi
  keep "$1" "$2"
  local size
  for size in ${3//,/ }; do
    echo "$size $(value "$tmp/anchor" $size $5) $(value "$tmp/weft" $size $5)" >>"$tmp/rows"
  done
}

# The medians over the passes of a size's raw figure, weft's figure and their ratio (NF == 3 rows only: a
# pass that failed leaves a short row and is left out).
medians() {  # size -> "raw weft ratio passes"
  awk -v size="$1" "$awk_median"'
    $1 == size && NF == 3 && $2 > 0 { ++n; a[n] = $2; w[n] = $3; r[n] = $3 / $2 }
    END { if (n) printf "%.4g %.4g %.2fx %d\n", median(a, n), median(w, n), median(r, n), n; else print "n/a n/a n/a 0" }
  ' "$tmp/rows"
}

for provider in tcp shm "tcp;ofi_rxm"; do
  : >"$tmp/rows"
  for pass in $(seq "$passes"); do measure "$provider" lat 64,4096 $lat_iters t_typical_us "$pass"; done
  for size in 64 4096; do
    read -r a w r n <<<"$(medians $size)"
    printf 'ofi_perf: %-14s write lat %7s B  raw libfabric %9s us | weft %9s us (%s) | target <= 1.05x | median of %s\n' \
           "$provider" $size "$a" "$w" "$r" "$n"
  done
  : >"$tmp/rows"
  for pass in $(seq "$passes"); do measure "$provider" bw 65536,1048576 $bw_iters bw_mib_s "$pass"; done
  for size in 65536 1048576; do
    read -r a w r n <<<"$(medians $size)"
    printf 'ofi_perf: %-14s write bw  %7s B  raw libfabric %9s MiB/s | weft %9s MiB/s (%s) | target >= 0.95x | median of %s\n' \
           "$provider" $size "$a" "$w" "$r" "$n"
  done
done
