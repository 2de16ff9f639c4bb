# Sourced by pyverbs.sh and pyverbs_rxe.sh: the Python that has pyverbs, and the checks both make before
# running rdma-core's suite. pyverbs_require SUITE_DIR exits 0 with a SKIP line, saying why, when the suite
# or python3-pyverbs is absent.
python=/usr/bin/python3  # Debian's, where python3-pyverbs installs pyverbs

pyverbs_require() {
    if [ ! -f "$1/run_tests.py" ]; then
        echo "SKIP: no pyverbs test suite at $1 (set WEFT_PYVERBS_TESTS to rdma-core's tests/ directory)"
        exit 0
    fi
    if [ ! -x "$python" ] || ! "$python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("pyverbs") is None)'; then
        echo "SKIP: $python has no pyverbs (apt-get install python3-pyverbs)"
        exit 0
    fi
}
