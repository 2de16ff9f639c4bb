#!/usr/bin/env bash
# Runs a binary built with the verbs and ofi plugins on a view of this machine where libibverbs and
# libfabric cannot be loaded (each hidden behind an empty file in a private mount namespace), and checks
# that the simulator still works and that both plugins are reported unusable with the loader's reason.
#   without-rdma-libraries.sh WEFT_INFO WEFT_PINGPONG
set -euo pipefail
info=$1 pingpong=$2
if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null; then
  echo "SKIP: needs root and unshare to hide the libraries"; exit 0
fi
hide=""
for lib in libibverbs.so.1 libfabric.so.1; do
  # awk reads to the end: an early exit would kill ldconfig with SIGPIPE, failing the pipeline (pipefail)
  # whenever ldconfig had not finished writing.
  path=$(ldconfig -p | awk -v l="$lib" '$1 == l && !found { print $NF; found = 1 }')
  [ -n "$path" ] && hide="$hide mount --bind /dev/null $(readlink -f "$path");"
done
unshare -m sh -c "$hide \"$info\"; \"$pingpong\" --backend sim --iters 100" > out.txt 2>&1 || { cat out.txt; exit 1; }
cat out.txt
grep -q '^verbs  UNUSABLE' out.txt
grep -q '^ofi    UNUSABLE' out.txt
grep -q 'why: plugin .*libweft-verbs.so could not be loaded: .*libibverbs' out.txt
grep -q '^sim    usable' out.txt
grep -q 'send/recv      round trip' out.txt
echo "ok: the simulator runs without libibverbs and libfabric; both plugins say why they are unusable"
