#!/usr/bin/env bash
# Prints weft-pingpong's latency on libfabric's host providers beside fi_pingpong's on the same provider,
# measured in the same run, over loopback only (127.0.0.1).
#   bench/ofi_pingpong.sh BUILD_DIR
# fi_pingpong runs client and server as two processes and reports usec per one-way transfer; weft-pingpong
# runs both QPs in one process and reports the round trip (two transfers).
set -uo pipefail
bin=$1/bin
run_fi() {  # provider ep_type
  timeout 60 fi_pingpong -p "$1" -e "$2" -I 1000 -S 64 >/dev/null 2>&1 &
  local server=$!
  sleep 1
  local line
  line=$(timeout 60 fi_pingpong -p "$1" -e "$2" -I 1000 -S 64 127.0.0.1 2>&1 | awk '$1 == "64" { print $7 }')
  wait "$server" 2>/dev/null
  echo "${line:-n/a}"
}
for spec in "tcp msg" "shm rdm"; do
  set -- $spec
  fi=$(run_fi "$1" "$2")
  weft=$("$bin/weft-pingpong" --backend "ofi:provider=$1" --iters 1000 2>&1 | awk '/send\/recv/ { print $5 }')
  printf 'ofi_pingpong: %-4s fi_pingpong %s us per transfer (two processes) | weft-pingpong send/recv round trip p50 %s us (one process)\n' \
         "$1" "$fi" "${weft:-n/a}"
done
