#!/usr/bin/env bash
# Runs every libFuzzer target of a WEFT_FUZZ build over its seed corpus for RUNS executions each.
#   tests/fuzz/run.sh BUILD_DIR [RUNS]        (default 1000000)
# Each target starts from tests/fuzz/corpus/<target> (read only: what it finds goes to a scratch directory)
# and stops at the first input that crashes or violates a property, which is copied to the working
# directory as crash-<sha1> (or leak-, oom-). Targets run side by side, one per core ($WEFT_FUZZ_JOBS sets
# how many). Exits 1 if any target failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${1:?usage: tests/fuzz/run.sh BUILD_DIR [RUNS]}")
runs=${2:-1000000}
case $runs in ''|*[!0-9]*) echo "run.sh: RUNS must be a number, got '$runs'" >&2; exit 2 ;; esac
shopt -s nullglob
targets=("$build"/bin/weft-fuzz-*)
[ ${#targets[@]} -gt 0 ] || { echo "run.sh: no weft-fuzz-* in $build/bin (configure with CXX=clang++ -DWEFT_FUZZ=ON)" >&2; exit 2; }

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# One target: its result lines go to $scratch/NAME.result; exits 1 when it failed.
fuzz_one() {
  local bin=$1 name=${1##*/weft-fuzz-}
  local seeds=$PWD/tests/fuzz/corpus/$name out=$scratch/${1##*/weft-fuzz-}.result
  mkdir -p "$scratch/$name"
  local start=$SECONDS
  # From a directory of its own: whatever a target writes (a crash input) stays there.
  mkdir -p "$scratch/cwd-$name"
  (cd "$scratch/cwd-$name" &&
   ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
     "$bin" -runs="$runs" -print_final_stats=1 "$scratch/$name" $( [ -d "$seeds" ] && echo "$seeds" ) \
     >"$scratch/$name.log" 2>&1)
  local rc=$?
  local execs corpus
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch/$name.log")
  corpus=$(ls "$scratch/$name" | wc -l)
  if [ $rc -eq 0 ]; then
    printf 'fuzz: %-14s %9s executions in %3d s, %4d new inputs kept, no failure\n' "$name" "${execs:-?}" \
      $((SECONDS - start)) "$corpus" >"$out"
    return 0
  fi
  {
    printf 'fuzz: %-14s FAILED after %s executions (exit %d):\n' "$name" "${execs:-?}" "$rc"
    grep -E 'property violated|ERROR: |SUMMARY|Test unit written|^#0|^    #[0-9] ' "$scratch/$name.log" | head -30 | sed 's/^/  /'
    for c in "$scratch/cwd-$name"/crash-* "$scratch/cwd-$name"/leak-* "$scratch/cwd-$name"/oom-*; do
      cp "$c" . && echo "  the input: ./${c##*/} (replay: $bin ./${c##*/})"
    done
  } >"$out"
  return 1
}

# As many targets at a time as there are cores ($WEFT_FUZZ_JOBS overrides); results in target order.
jobs=${WEFT_FUZZ_JOBS:-$(nproc)}
case $jobs in ''|*[!0-9]*|0) echo "run.sh: WEFT_FUZZ_JOBS must be a positive number, got '$jobs'" >&2; exit 2 ;; esac
failed=0
running=0
for bin in "${targets[@]}"; do
  if [ $running -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  fuzz_one "$bin" &
  running=$((running + 1))
done
while [ $running -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
for bin in "${targets[@]}"; do cat "$scratch/${bin##*/weft-fuzz-}.result"; done
exit $failed
