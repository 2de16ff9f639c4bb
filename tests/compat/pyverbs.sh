#!/bin/sh
# Runs rdma-core's own pyverbs test suite (rdma-core 44's tests/, kept outside the project) on the front
# end, in one process, on BACKEND (default sim), and fails if any test fails or errors, or if fewer than
# MIN_OK tests pass (so that a front end whose device vanished, which makes every test skip, fails too).
# Prints the suite's verbose output and a table per module. Skips, saying why, when python3-pyverbs or
# the suite is absent.
#   usage: pyverbs.sh FRONT_END_LIBRARY_DIR DEFAULT_SUITE_DIR MIN_OK [BACKEND [KNOWN_FAILURES]]
# KNOWN_FAILURES: test names (comma-separated) that BACKEND fails for a reason documented in
# docs/verbs-frontend.md; each must fail (a known failure that passes fails the run, so the list stays
# true), and any other failure fails the run.
#   $WEFT_PYVERBS_TESTS: the suite's directory (the one holding run_tests.py), instead of DEFAULT_SUITE_DIR
set -u
libdir=$1
suite=${WEFT_PYVERBS_TESTS:-$2}
min_ok=$3
backend=${4:-sim}
known=${5:-}
device=weft_${backend%%:*}0
. "$(dirname "$0")/pyverbs_common.sh"

pyverbs_require "$suite"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
# The suite writes nothing but its own output: no bytecode next to it (it may be read-only).
LD_LIBRARY_PATH=$libdir WEFT_BACKEND=$backend PYTHONDONTWRITEBYTECODE=1 \
    "$python" "$suite/run_tests.py" -v --dev "$device" >"$out" 2>&1
status=$?
cat "$out"

# One row per module: the module is named in the line that opens each test ("name (tests.module.Class.name)"),
# its result ends the line of the test or of its docstring (" ... ok"), or stands on a line of its own
# when the test printed something after the " ... ".
echo
printf '%-28s %5s %8s %7s\n' module ok skipped failed
awk '
    match($0, /\(tests\.test_[a-z0-9_]+\./) { module = substr($0, RSTART + 7, RLENGTH - 8); seen[module] = 1 }
    /(^| \.\.\. )ok$/ { ok[module]++ }
    /(^| \.\.\. )skipped / { skipped[module]++ }
    /(^| \.\.\. )(FAIL|ERROR)$/ { failed[module]++ }
    END { for (m in seen) printf "%-28s %5d %8d %7d\n", m, ok[m], skipped[m], failed[m] }' "$out" | sort |
    awk '{ print; ok += $2; skipped += $3; failed += $4 } END { printf "%-28s %5d %8d %7d\n", "all", ok, skipped, failed }'

passed=$(grep -Ec '(^| \.\.\. )ok$' "$out")
failed=$(sed -n -E 's/^(FAIL|ERROR): ([A-Za-z0-9_]+) .*/\2/p' "$out" | sort -u)
unexpected=
for name in $failed; do
    case ",$known," in
        *",$name,"*) echo "known failure on $backend: $name" ;;
        *) unexpected="$unexpected $name" ;;
    esac
done
for name in $(echo "$known" | tr ',' ' '); do
    if ! echo "$failed" | grep -qx "$name"; then
        echo "FAIL: $name, listed as a known failure on $backend, did not fail: take it off the list"
        exit 1
    fi
done
if [ -n "$unexpected" ] || { [ -z "$known" ] && ! grep -Eq '^OK( \(|$)' "$out"; }; then
    echo "FAIL: the suite reports failures or errors (exit status $status):$unexpected"
    exit 1
fi
if [ "$passed" -lt "$min_ok" ]; then
    echo "FAIL: $passed tests passed, fewer than the $min_ok expected"
    exit 1
fi
echo "$passed tests passed (at least $min_ok expected), no failure but the known ones"
