#!/bin/sh
# tests/compat/pyverbs_rxe.sh FRONT_END_LIBRARY_DIR DEFAULT_SUITE_DIR MIN_BOTH — run in the Soft-RoCE guest:
# rdma-core's pyverbs suite on the real rxe0 device (the system libibverbs) and on the front end over the
# simulator's rxe profile (WEFT_BACKEND=sim:profile=rxe), then compares them test by test. Every test that
# ran on both (skipped on neither) must have the same result on both; at least MIN_BOTH tests must have run
# on both. Prints a table per module (docs/verbs-frontend.md, "Against rxe"). Skips, saying why, without
# python3-pyverbs, the suite or an rxe device.
#   $WEFT_PYVERBS_TESTS: the suite's directory (the one holding run_tests.py), instead of DEFAULT_SUITE_DIR
set -u
libdir=$1
suite=${WEFT_PYVERBS_TESTS:-$2}
min_both=$3
. "$(dirname "$0")/pyverbs_common.sh"

pyverbs_require "$suite"
if [ ! -e /sys/class/infiniband/rxe0 ]; then
    echo "SKIP: no rxe0 device here (run it in the Soft-RoCE guest: tools/softroce/run-in-guest)"
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# GID 1 is rxe0's RoCE v2 GID; the front end's port has GID 0 only.
PYTHONDONTWRITEBYTECODE=1 "$python" "$suite/run_tests.py" -v --dev rxe0 --gid 1 >"$work/rxe" 2>&1
LD_LIBRARY_PATH=$libdir WEFT_BACKEND=sim:profile=rxe PYTHONDONTWRITEBYTECODE=1 \
    "$python" "$suite/run_tests.py" -v --dev weft_sim0 >"$work/sim" 2>&1

"$python" - "$work/rxe" "$work/sim" "$min_both" <<'EOF'
import re, sys

def results(path):
    """test id -> ok, skipped, FAIL or ERROR, from unittest's verbose output."""
    out, current = {}, None
    opening = re.compile(r'\((tests\.test_[a-z0-9_]+\.[A-Za-z0-9_]+\.[A-Za-z0-9_]+)\)')
    for line in open(path, errors='replace'):
        line = line.rstrip('\n')
        m = opening.search(line)
        if m:
            current = m.group(1)
        if current is None:
            continue
        m = re.search(r'(?:^| \.\.\. )(ok|skipped .*|FAIL|ERROR)$', line)
        if m and current not in out:
            out[current] = m.group(1).split(' ')[0]
    return out

rxe, sim = results(sys.argv[1]), results(sys.argv[2])
min_both = int(sys.argv[3])
modules = {}
differ = []
for test in sorted(set(rxe) | set(sim)):
    module = test.split('.')[1]
    row = modules.setdefault(module, [0, 0, 0, 0, 0])
    a, b = rxe.get(test, 'absent'), sim.get(test, 'absent')
    row[0] += 1
    if a == 'ok': row[1] += 1
    if b == 'ok': row[2] += 1
    if a in ('skipped', 'absent') or b in ('skipped', 'absent'):
        continue
    row[3] += 1
    if a == b:
        row[4] += 1
    else:
        differ.append((test, a, b))
print('%-24s %5s %6s %6s %9s %5s' % ('module', 'tests', 'rxe ok', 'sim ok', 'both ran', 'same'))
total = [0, 0, 0, 0, 0]
for module, row in sorted(modules.items()):
    if row[3] == 0 and row[1] == 0 and row[2] == 0:
        continue
    print('%-24s %5d %6d %6d %9d %5d' % (module, *row))
    total = [t + r for t, r in zip(total, row)]
print('%-24s %5d %6d %6d %9d %5d' % ('all (modules shown)', *total))
for test, a, b in differ:
    print('DIFFERENT: %s: rxe %s, sim:profile=rxe %s' % (test, a, b))
if differ:
    print('FAIL: %d tests that ran on both differ' % len(differ))
    sys.exit(1)
if total[3] < min_both:
    print('FAIL: %d tests ran on both, fewer than the %d expected' % (total[3], min_both))
    sys.exit(1)
print('%d tests ran on both rxe0 and sim:profile=rxe with the same result' % total[3])
EOF
