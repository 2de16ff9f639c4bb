#!/usr/bin/env bash
# Prints what weft's verbs data path costs beyond raw verbs on the same fake provider (no device needed):
# instructions per request counted by callgrind (repeatable, independent of machine load) beside the raw
# program's, with the budget weft may add, then ns per request and the fd() mode's system calls from a
# native run (bench/verbs_datapath.cpp says what runs).
#   bench/verbs_datapath.sh BUILD_DIR [--strict]
# A scenario that adds more instructions per request than its budget is marked OVER BUDGET; the script then
# still exits 0 (the figures are for reading), unless --strict asks it to exit 1.
set -euo pipefail
bin=$1/bin/weft-bench-verbs-datapath
strict=0
[ "${2:-}" = "--strict" ] && strict=1
[ -x "$bin" ] || { echo "no $bin (built when the headers of rdma-core and valgrind are found)"; exit 0; }

status=0
if command -v valgrind >/dev/null; then
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
  valgrind --tool=callgrind --callgrind-out-file="$dir/cg" "$bin" --callgrind >/dev/null 2>"$dir/log" ||
    { cat "$dir/log"; exit 1; }
  echo "verbs data path over a fake provider: instructions per request (callgrind)"
  # Each dump: "desc: Trigger: Client Request: NAME VARIANT REQUESTS BUDGET" and "totals: INSTRUCTIONS".
  for f in "$dir"/cg.*; do
    awk '/^desc: Trigger: Client Request:/ { print $5, $6, $7, $8 } /^totals:/ { print $2 }' "$f" | paste -sd' '
  done | awk 'NF == 5 { ir[$1, $2] = $5 / $3; budget[$1] = $4; if (!($1 in seen)) { seen[$1] = 1; order[n++] = $1 } }
    END {
      printf "  %-14s %8s %8s %8s %8s\n", "scenario", "raw", "weft", "+weft", "budget"
      bad = 0
      for (i = 0; i < n; ++i) {
        s = order[i]; d = ir[s, "weft"] - ir[s, "raw"]
        verdict = d <= budget[s] ? "ok" : "OVER BUDGET"
        if (d > budget[s]) bad = 1
        printf "  %-14s %8.1f %8.1f %+8.1f %8d  %s\n", s, ir[s, "raw"], ir[s, "weft"], d, budget[s], verdict
      }
      exit bad
    }' || status=1
else
  echo "valgrind is not installed: no instruction counts (apt-get install valgrind)"
fi
"$bin" --iters 200000
[ $status -ne 0 ] && [ $strict -eq 1 ] && exit 1
exit 0
