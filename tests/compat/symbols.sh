#!/bin/sh
# Checks that the front end's libibverbs.so.1 exports exactly the public functions of rdma-core's, each
# with the same symbol version, so that every program built against the system library loads with it.
#   usage: symbols.sh FRONT_END_LIBRARY SYSTEM_LIBRARY
set -eu
# "ibv_reg_mr IBVERBS_1.1" for each defined, default-version IBVERBS_1.x symbol: neither the provider
# interface (IBVERBS_PRIVATE_*) nor the hidden versions kept for old binaries ("(IBVERBS_1.0)").
exports() {
    objdump -T "$1" | awk '$2 == "g" && $(NF-1) ~ /^IBVERBS_1\./ && $NF != $(NF-1) { print $NF, $(NF-1) }' | sort
}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
exports "$2" >"$dir/system"
exports "$1" >"$dir/front-end"
if ! diff "$dir/system" "$dir/front-end"; then
    echo "FAIL: the exports differ (< $2, > $1)"
    exit 1
fi
test -s "$dir/system"
echo "$(wc -l <"$dir/system") functions, the same names and versions as $2"
