#!/usr/bin/env bash
# Prints weft-pingpong's latency beside fi_pingpong's on the same libfabric provider, measured in the same
# run: fi_pingpong (two processes), weft-pingpong in two processes (--listen/--connect through weft's
# listener, started by examples/pingpong/two-process.sh), weft-ofi-smoke's two-process ping-pong (the QP
# addresses cross over pipes) and weft-pingpong with both QPs in one process.
#   bench/ofi_pingpong.sh BUILD_DIR            # host providers over loopback: tcp, shm, tcp;ofi_rxm
#   bench/ofi_pingpong.sh BUILD_DIR guest      # in the Soft-RoCE guest: libfabric's verbs provider on rxe0,
#                                              # and weft's native verbs backend beside it
# fi_pingpong reports usec per transfer (one way: a round trip is two transfers); the smoke prints the
# same; weft-pingpong gives the round-trip p50 of send/recv, and half of it as one-way. 64-byte messages.
set -uo pipefail
bin=$1/bin
where=${2:-host}
here=$(dirname "$0")
iters=1000

fi_one_way() {  # provider ep_type server_address
  timeout 60 fi_pingpong -p "$1" -e "$2" -I $iters -S 64 >/dev/null 2>&1 &
  local server=$!
  sleep 1
  local line
  line=$(timeout 60 fi_pingpong -p "$1" -e "$2" -I $iters -S 64 "$3" 2>&1 | awk '$1 == "64" { print $7 }')
  wait "$server" 2>/dev/null
  echo "${line:-n/a}"
}

smoke_two_process() {  # config -> one-way us of weft-ofi-smoke's two-process ping-pong (addresses over pipes)
  timeout 120 "$bin/weft-ofi-smoke" "$1" two-process 2>&1 |
    awk '/ping-pong/ { for (i = 1; i <= NF; ++i) if ($i == "us") print $(i - 1) }'
}

weft_one_process() {  # config
  "$bin/weft-pingpong" --backend "$1" --iters $iters 2>&1 | awk '/send\/recv/ { print $5 }'
}

weft_two_process() {  # host config -> the client's send/recv round-trip p50 (server and client on this machine)
  "$here/../examples/pingpong/two-process.sh" --host "$1" "$bin/weft-pingpong" "$2" --iters $iters 2>&1 |
    awk '/^  send\/recv/ { print $5 }'
}

half() { awk -v v="$1" 'BEGIN { if (v ~ /^[0-9.]+$/) printf "%.2f", v / 2; else print "n/a" }'; }

row() {  # label fi_one_way weft_two_process_round_trip smoke_one_way weft_one_process_round_trip
  printf 'ofi_pingpong: %-28s fi_pingpong %8s us one-way | weft-pingpong two processes %8s us one-way (round trip p50 %s) | weft-ofi-smoke two processes %8s us one-way | weft-pingpong one process: round trip p50 %8s us (one-way %s)\n' \
         "$1" "$2" "$(half "${3:-}")" "${3:-n/a}" "${4:-n/a}" "${5:-n/a}" "$(half "${5:-}")"
}

if [ "$where" = guest ]; then
  ip=192.0.2.1
  row "ofi:provider=verbs (rxe0)" "$(fi_one_way verbs msg "$ip")" "$(weft_two_process "$ip" ofi:provider=verbs,domain=rxe0)" \
      "$(smoke_two_process ofi:provider=verbs,domain=rxe0)" "$(weft_one_process ofi:provider=verbs,domain=rxe0)"
  native=verbs:device=rxe0,gid_index=1
  two=$(weft_two_process "$ip" "$native")
  printf 'ofi_pingpong: %-28s weft-pingpong two processes %8s us one-way (round trip p50 %s) | weft-pingpong one process: round trip p50 %8s us\n' \
         "verbs:device=rxe0 (native)" "$(half "$two")" "${two:-n/a}" "$(weft_one_process "$native")"
  exit 0
fi

for spec in "tcp msg" "shm rdm" "tcp;ofi_rxm rdm"; do
  set -- $spec
  row "ofi:provider=$1" "$(fi_one_way "$1" "$2" 127.0.0.1)" "$(weft_two_process 127.0.0.1 "ofi:provider=$1")" \
      "$(smoke_two_process "ofi:provider=$1")" "$(weft_one_process "ofi:provider=$1")"
done
