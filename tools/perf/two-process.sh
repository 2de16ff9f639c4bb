#!/usr/bin/env bash
# Runs weft-perf in two processes on this machine (tools/two-process.sh): a server listening on HOST:0, then
# a client connected to the port the server names; exits 0 only when both sides exit 0.
#   tools/perf/two-process.sh [--host HOST] WEFT_PERF CONFIG [CLIENT ARGS...]
#   tools/perf/two-process.sh build/bin/weft-perf ofi:provider=tcp -o all -T both -n 200 --check
# HOST defaults to 127.0.0.1 (verbs needs the RDMA interface's address, e.g. 192.0.2.1 in the Soft-RoCE
# guest). Each side runs under `timeout`, $WEFT_PERF_TIMEOUT seconds (default 120).
exec "$(dirname "$0")/../two-process.sh" --timeout "${WEFT_PERF_TIMEOUT:-120}" "$@"
