#!/usr/bin/env bash
# Runs weft-pingpong in two processes on this machine (tools/two-process.sh): a server listening on HOST:0,
# then a client connected to the port the server names; exits 0 only when both sides exit 0.
#   examples/pingpong/two-process.sh [--host HOST] PINGPONG CONFIG [CLIENT ARGS...]
#   examples/pingpong/two-process.sh build/bin/weft-pingpong ofi:provider=tcp --iters 1000
# HOST defaults to 127.0.0.1 (verbs needs the RDMA interface's address, e.g. 192.0.2.1 in the Soft-RoCE
# guest). Each side runs under `timeout`, $WEFT_PINGPONG_TIMEOUT seconds (default 60).
exec "$(dirname "$0")/../../tools/two-process.sh" --timeout "${WEFT_PINGPONG_TIMEOUT:-60}" "$@"
