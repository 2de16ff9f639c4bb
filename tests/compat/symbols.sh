#!/bin/sh
# Checks that the front end's libibverbs.so.1 exports exactly the public functions of rdma-core's, each
# with the same symbol version, so that every program built against the system library loads with it;
# and the same private provider interface (IBVERBS_PRIVATE_<n>), which provider libraries and pyverbs
# link against, when the system library's is the version the front end provides.
#   usage: symbols.sh FRONT_END_LIBRARY SYSTEM_LIBRARY
set -eu
# "ibv_reg_mr IBVERBS_1.1" for each defined, default-version symbol whose version matches $2: not the
# hidden versions kept for old binaries ("(IBVERBS_1.0)").
exports() {
    objdump -T "$1" | awk -v v="$2" '$2 == "g" && $(NF-1) ~ v && $NF != $(NF-1) { print $NF, $(NF-1) }' | sort
}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
exports "$2" '^IBVERBS_1\.' >"$dir/system"
exports "$1" '^IBVERBS_1\.' >"$dir/front-end"
if ! diff "$dir/system" "$dir/front-end"; then
    echo "FAIL: the exports differ (< $2, > $1)"
    exit 1
fi
test -s "$dir/system"
echo "$(wc -l <"$dir/system") functions, the same names and versions as $2"

exports "$2" '^IBVERBS_PRIVATE_' >"$dir/system-private"
exports "$1" '^IBVERBS_PRIVATE_' >"$dir/front-end-private"
system_version=$(awk 'NR == 1 { print $2 }' "$dir/system-private")
front_end_version=$(awk 'NR == 1 { print $2 }' "$dir/front-end-private")
if [ "$system_version" != "$front_end_version" ]; then
    echo "note: the system library's provider interface is ${system_version:-absent}, the front end's" \
         "$front_end_version: not compared"
    exit 0
fi
if ! diff "$dir/system-private" "$dir/front-end-private"; then
    echo "FAIL: the provider interfaces differ (< $2, > $1)"
    exit 1
fi
echo "$(wc -l <"$dir/system-private") symbols of $system_version, the same as $2"
