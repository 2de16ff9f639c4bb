#!/usr/bin/env bash
# tests/package/consume.sh STAGE WORK — builds a small consumer of weft four ways and runs each on the
# simulator (and on libfabric's tcp provider where the ofi plugin is built):
#   1. find_package(weft CONFIG) against the install at STAGE (cmake --install of weft's build);
#   2. pkg-config against STAGE, compiled as C++23 (the .pc files carry no -std=);
#   3. add_subdirectory of this source tree: building only the consumer builds the plugins; the parent's
#      empty CMAKE_BUILD_TYPE stays empty; no tools, smoke programs or tests are built; the parent's
#      install gets libweft and the plugins (and no headers);
#   4. FetchContent from an archive of this source tree (a file:// URL: no network), installing
#      everything (WEFT_INSTALL=ON).
# Every consumer also builds a Boost.Test module through weft::testing (or pkg-config's weft-testing).
# WORK is scratch space (wiped). Set CXX to choose the compiler.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -eq 2 ] || { echo "usage: $0 STAGE WORK" >&2; exit 2; }
stage=$(realpath "$1")
rm -rf "$2" && mkdir -p "$2"
work=$(realpath "$2")
pkg=$src/tests/package
jobs=$(nproc)
export WEFT_SIM_SEEDS=5
unset WEFT_BACKEND WEFT_PLUGIN_PATH

step() { printf 'consume.sh: %s\n' "$*"; }
fail() { printf 'consume.sh: FAILED: %s\n' "$*" >&2; exit 1; }
# quiet CMD...: runs CMD with its output kept in a log, printed only when it fails.
quiet() { "$@" >"$work/last.log" 2>&1 || { cat "$work/last.log"; fail "$*"; }; }
# run_consumer DIR: the consumer on sim (and ofi tcp when WITH_OFI), and the Boost.Test module.
run_consumer() {
  "$1/consumer" | tail -1
  [ "$with_ofi" = yes ] && { "$1/consumer" ofi:provider=tcp | tail -1; }
  "$1/consumer-tests" --report_level=short
}
with_ofi=no
[ -e "$stage/lib/weft/libweft-ofi.so" ] && with_ofi=yes

step "1. find_package(weft CONFIG) against $stage"
quiet cmake -S "$pkg" -B "$work/find-package" -G Ninja -DWEFT_CONSUME=find_package -DCMAKE_PREFIX_PATH="$stage"
quiet cmake --build "$work/find-package" -j "$jobs"
run_consumer "$work/find-package"

step "2. pkg-config against $stage"
export PKG_CONFIG_PATH="$stage/lib/pkgconfig"
cflags=$(pkg-config --cflags weft-testing)
case " $cflags " in *" -std="*) fail "pkg-config --cflags weft-testing forces a standard: $cflags" ;; esac
mkdir -p "$work/pkg-config"
# shellcheck disable=SC2046  # word splitting of pkg-config's output is intended
"${CXX:-c++}" -std=c++2b -o "$work/pkg-config/consumer" "$pkg/main.cpp" $(pkg-config --cflags --libs weft) \
  -Wl,-rpath,"$stage/lib"
# shellcheck disable=SC2046
"${CXX:-c++}" -std=c++20 -o "$work/pkg-config/consumer-tests" "$pkg/sweep_test.cpp" \
  $(pkg-config --cflags --libs weft-testing) -Wl,-rpath,"$stage/lib"
run_consumer "$work/pkg-config"

step "3. add_subdirectory($src), empty CMAKE_BUILD_TYPE, the parent's -Wconversion -Wsign-conversion -Werror"
sub=$work/subdirectory
quiet cmake -S "$pkg" -B "$sub" -G Ninja -DWEFT_CONSUME=subdirectory -DWEFT_SOURCE_DIR="$src" \
            -DCMAKE_INSTALL_PREFIX="$work/subdirectory-install" "-DCMAKE_CXX_FLAGS=-Wconversion -Wsign-conversion -Werror"
grep -q '^CMAKE_BUILD_TYPE:STRING=$' "$sub/CMakeCache.txt" || fail "weft changed the parent's empty CMAKE_BUILD_TYPE"
quiet cmake --build "$sub" -j "$jobs" --target consumer consumer-tests
for p in verbs ofi; do
  if [ -e "$stage/lib/weft/libweft-$p.so" ] && [ ! -e "$sub/weft/lib/libweft-$p.so" ]; then
    fail "building the consumer did not build the $p plugin"
  fi
done
run_consumer "$sub"
quiet cmake --build "$sub" -j "$jobs"
for t in weft-info weft-perf weft-pingpong weft-ofi-smoke weft-verbs-smoke weft-unit-tests weft-conformance; do
  [ ! -e "$sub/weft/bin/$t" ] || fail "a subproject weft built $t"
done
quiet cmake --install "$sub"
inst=$work/subdirectory-install
ls "$inst"/lib/libweft.so.* >/dev/null || fail "the parent's install lacks libweft"
for p in verbs ofi; do
  [ ! -e "$sub/weft/lib/libweft-$p.so" ] || [ -e "$inst/lib/weft/libweft-$p.so" ] || fail "the parent's install lacks the $p plugin"
done
[ ! -e "$inst/include/weft" ] || fail "a subproject weft installed its headers without WEFT_INSTALL"
LD_LIBRARY_PATH="$inst/lib" "$inst/bin/consumer" | tail -1
[ "$with_ofi" = yes ] && { LD_LIBRARY_PATH="$inst/lib" "$inst/bin/consumer" ofi:provider=tcp | tail -1; }

step "4. FetchContent from file://$work/weft-source.tar.gz, WEFT_INSTALL=ON"
tar -C "$src" --exclude-vcs --exclude='./build*' --exclude=./.cache -czf "$work/weft-source.tar.gz" .
fc=$work/fetchcontent
quiet cmake -S "$pkg" -B "$fc" -G Ninja -DWEFT_CONSUME=fetchcontent -DWEFT_URL="file://$work/weft-source.tar.gz" \
            -DCMAKE_BUILD_TYPE=Release -DWEFT_INSTALL=ON -DCMAKE_INSTALL_PREFIX="$work/fetchcontent-install"
quiet cmake --build "$fc" -j "$jobs" --target consumer consumer-tests
run_consumer "$fc"
quiet cmake --install "$fc"
for f in include/weft/weft.hpp lib/cmake/weft/weftConfig.cmake lib/pkgconfig/weft.pc; do
  [ -e "$work/fetchcontent-install/$f" ] || fail "WEFT_INSTALL=ON in a subproject did not install $f"
done

step "all four ways built and ran"
