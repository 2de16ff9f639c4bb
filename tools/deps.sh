# tools/deps.sh — installs the Debian 12 packages weft builds and tests with, when any is missing.
# Sourced by tools/demo and tools/test; needs root (or sudo) for apt-get.
weft_packages=(
  cmake ninja-build g++ clang pkg-config doxygen
  libboost-test-dev librange-v3-dev
  libibverbs-dev librdmacm-dev ibverbs-providers rdma-core
  libfabric-dev libfabric-bin
)

weft_install_deps() {
  local missing=()
  local p
  for p in "${weft_packages[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== installing: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}
