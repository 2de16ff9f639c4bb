# shellcheck shell=bash disable=SC2154,SC2034  # bin and tmp come from the script; awk_median goes to it
# Shared by the benchmark scripts in bench/: sourced, not run. Expects `bin` (the build's bin directory) and
# `tmp` (a scratch directory) to be set.

# Runs weft-bench-fi-anchor as a server on HOST:0 and its client against the port the server prints, the
# two with the same provider arguments; the client's output (--json lines) goes to standard output.
#   fi_anchor_pair HOST "PROVIDER_ARGS" CLIENT_ARGS...      e.g. fi_anchor_pair 127.0.0.1 "-p tcp" -o write ...
fi_anchor_pair() {
  local host=$1 provider=$2
  shift 2
  # shellcheck disable=SC2086  # the provider arguments are words on purpose
  timeout 120 "$bin/weft-bench-fi-anchor" $provider --listen "$host:0" >"$tmp/fi-anchor-server" 2>&1 &
  local server=$! port=
  for _ in $(seq 1000); do
    port=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\)$/\1/p' "$tmp/fi-anchor-server")
    [ -n "$port" ] && break
    sleep 0.01
  done
  # shellcheck disable=SC2086
  timeout 120 "$bin/weft-bench-fi-anchor" $provider --connect "$host:$port" "$@" 2>/dev/null
  wait "$server" 2>/dev/null
}

# An awk function for the scripts' awk programs: median(v, n) of v[1..n], which it sorts.
awk_median='
  function median(v, n,   i, j, t) {
    for (i = 2; i <= n; ++i) for (j = i; j > 1 && v[j - 1] > v[j]; --j) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }'
