#!/usr/bin/env bash
# Prints weft-perf beside perftest and raw libfabric on the same RDMA device, measured in the same run, each
# row with its ratios: RDMA write bandwidth at 64 KiB (ib_write_bw), write latency at 2 bytes (ib_write_lat)
# and send latency at 2 bytes (ib_send_lat), against weft-perf on the native verbs backend, and weft-perf on
# libfabric's verbs provider against both perftest and weft-bench-fi-anchor (raw libfabric on the same
# provider, domain and hints as the ofi backend), all in two processes on one device. Meant for the
# Soft-RoCE guest (tools/softroce/run-in-guest):
#   bench/verbs_perftest.sh BUILD_DIR [DEVICE IP GID_INDEX]     # defaults: rxe0 192.0.2.1 1
# Targets (docs/performance.md): verbs >= 0.97x perftest's bandwidth and <= 1.03x its latency; ofi >= 0.95x
# raw libfabric's bandwidth and <= 1.05x its latency. perftest's MB/sec are MiB/s, as weft-perf's
# bw_mib_s; latencies are perftest's t_typical and weft-perf's t_typical_us (the median), one way.
#
# Emulated rxe drifts by tens of percent within a minute: each figure is measured in `passes` rounds
# (WEFT_VERBS_PERF_PASSES, default 3), the four programs' order rotating with the round, and each column
# is the median of its rounds, each ratio the median of the rounds' ratios.
set -uo pipefail
bin=$1/bin
dev=${2:-rxe0}
ip=${3:-192.0.2.1}
gid=${4:-1}
here=$(dirname "$0")
passes=${WEFT_VERBS_PERF_PASSES:-3}
bw_iters=2000
lat_iters=1000
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=bench/lib.sh
. "$here/lib.sh"
export FI_UNIVERSE_SIZE=${FI_UNIVERSE_SIZE:-16}

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

key() { [ "$1" = bw ] && echo bw_mib_s || echo t_typical_us; }
field() { sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" "$1" | head -1; }

weft() {  # config op test size iters -> bw_mib_s or t_typical_us of the client
  WEFT_PERF_TIMEOUT=120 "$here/../tools/perf/two-process.sh" --host "$ip" "$bin/weft-perf" "$1" \
    -o "$2" -T "$3" -s "$4" -n "$5" --json --no-progress >"$tmp/json" 2>/dev/null
  field "$tmp/json" "$(key "$3")"
}

anchor() {  # op test size iters -> the same figure from raw libfabric on the verbs provider
  fi_anchor_pair "$ip" "-p verbs -d $dev" -o "$1" -T "$2" -s "$3" -n "$4" --json >"$tmp/json"
  field "$tmp/json" "$(key "$2")"
}

# The medians of each column and of the rounds' ratios weft/perftest (columns 2/1) and ofi/anchor (4/3)
# and ofi/perftest (4/1); a round where a program printed nothing leaves "-" and is left out of what uses it.
medians() {
  awk "$awk_median"'
    function ok(x) { return x ~ /^[0-9.e+-]+$/ && x > 0 }
    {
      for (c = 1; c <= 4; ++c) if (ok($c)) col[c, ++n[c]] = $c
      if (ok($1) && ok($2)) r1[++m1] = $2 / $1
      if (ok($3) && ok($4)) r2[++m2] = $4 / $3
      if (ok($1) && ok($4)) r3[++m3] = $4 / $1
    }
    END {
      for (c = 1; c <= 4; ++c) { delete v; for (i = 1; i <= n[c]; ++i) v[i] = col[c, i]; printf "%s ", n[c] ? median(v, n[c]) : "n/a" }
      printf "%s %s %s %d\n", m1 ? sprintf("%.2fx", median(r1, m1)) : "n/a", m2 ? sprintf("%.2fx", median(r2, m2)) : "n/a",
             m3 ? sprintf("%.2fx", median(r3, m3)) : "n/a", NR
    }' "$tmp/rows"
}

native=verbs:device=$dev,gid_index=$gid
ofi=ofi:provider=verbs,domain=$dev
figure() {  # label unit tool op test size iters verbs_target ofi_target
  : >"$tmp/rows"
  local pass p n a o slot
  for pass in $(seq "$passes"); do
    p='' n='' a='' o=''
    for slot in 0 1 2 3; do  # the round's order rotates by one program each round
      case $(((slot + pass - 1) % 4)) in
        0) p=$(perftest "$3" "$6" "$7") ;;
        1) n=$(weft "$native" "$4" "$5" "$6" "$7") ;;
        2) a=$(anchor "$4" "$5" "$6" "$7") ;;
        3) o=$(weft "$ofi" "$4" "$5" "$6" "$7") ;;
      esac
    done
    echo "${p:--} ${n:--} ${a:--} ${o:--}" >>"$tmp/rows"
  done
  read -r p n a o rn ro rp rounds <<<"$(medians)"
  printf 'verbs_perftest: %-16s perftest %8s %s | weft verbs %8s %s (%s, target %s) | raw libfabric verbs %8s %s | weft ofi:provider=verbs %8s %s (%s of raw libfabric, target %s; %s of perftest) | median of %s\n' \
         "$1" "$p" "$2" "$n" "$2" "$rn" "$8" "$a" "$2" "$o" "$2" "$ro" "$9" "$rp" "$rounds"
}

figure "write bw 64 KiB" MiB/s ib_write_bw write bw 65536 $bw_iters ">= 0.97x" ">= 0.95x"
figure "write lat 2 B" us ib_write_lat write lat 2 $lat_iters "<= 1.03x" "<= 1.05x"
figure "send lat 2 B" us ib_send_lat send lat 2 $lat_iters "<= 1.03x" "<= 1.05x"
