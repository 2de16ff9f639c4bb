#!/bin/sh
# libweft exports the simulator's public face (weft::sim::Fabric) and none of its internals: no function,
# variable, vtable or typeinfo of weft::sim::detail. (A standard-library template instantiated over a
# simulator type, which an unoptimized build keeps as a weak symbol of namespace std, is std's, not ours.)
#   tests/abi/sim_internals_hidden.sh LIBWEFT
set -u
syms=$(nm -DC --defined-only "$1") || exit 1
internal=$(printf '%s\n' "$syms" | awk '{
    name = $0; sub(/^[0-9a-f]* [A-Za-z] /, "", name)
    head = name; sub(/\(.*/, "", head)
    if ((name ~ /^weft::sim::detail::/ && head !~ / /) ||
        name ~ /^(vtable|typeinfo|typeinfo name|VTT|construction vtable) for weft::sim::detail::/) print name
}')
if [ -n "$internal" ]; then
  printf 'simulator internals are exported:\n%s\n' "$internal"
  exit 1
fi
printf '%s\n' "$syms" | grep -q 'weft::sim::Fabric::now() const' || { echo 'weft::sim::Fabric is not exported'; exit 1; }
echo "$(printf '%s\n' "$syms" | wc -l) symbols exported, no simulator internal"
