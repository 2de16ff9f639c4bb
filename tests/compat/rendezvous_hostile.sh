#!/usr/bin/env bash
# tests/compat/rendezvous_hostile.sh LIBDIR — the front end's per-host rendezvous against what a peer could
# put there (docs/verbs-frontend.md, "Several processes"). An unmodified ibv_rc_pingpong client on
# ofi:provider=tcp is handed, by a fake server speaking pingpong's exchange, the address of a QP whose
# rendezvous entry is missing, oversized, garbage, a symbolic link, or a GID that is no weft port's. Each
# time the client must fail at RTR (exit status 1, not a signal) and the front end must say why under
# WEFT_LOG=error:compat; then a rendezvous directory that other users may write is refused. Skipped, saying
# why, without ibv_rc_pingpong or python3.
set -uo pipefail
libdir=$(cd "$1" && pwd)  # absolute: the programs run in a directory of their own
for p in ibv_rc_pingpong python3 flock; do
  if ! command -v "$p" >/dev/null; then
    echo "SKIP: $p is not installed (apt-get install ibverbs-utils python3 util-linux)"
    exit 0
  fi
done

work=$(mktemp -d)
holder=
trap '[ -n "$holder" ] && { pkill -P "$holder"; kill "$holder"; } 2>/dev/null; rm -rf "$work"' EXIT
cd "$work"
dir=$work/rendezvous
mkdir -m 700 "$dir"
export LD_LIBRARY_PATH=$libdir WEFT_BACKEND=ofi:provider=tcp,queue_size=1024 WEFT_VERBS_RENDEZVOUS=$dir
export WEFT_LOG=error:compat
port=$((18800 + RANDOM % 100))
failed=0
server=

# A process holding LID 77, as a live front end would, but publishing what the test puts in its files.
lid=77
flock -x "$dir/lid-$lid" sleep 600 </dev/null >/dev/null 2>&1 &  # not holding the test's output open
holder=$!
sleep 0.2

# serve LID QPN GID: answers one pingpong client with that address (pingpong's "%04x:%06x:%06x:%s", NUL
# included), then reads its "done".
serve() {
  python3 - "$port" "$1" "$2" "$3" <<'EOF' &
import socket, sys
port, lid, qpn, gid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', port))
s.listen(1)
s.settimeout(60)
c, _ = s.accept()
c.settimeout(60)
msg = b''
while len(msg) < 52:
    part = c.recv(52 - len(msg))
    if not part:
        break
    msg += part
c.sendall(('%04x:%06x:%06x:%s' % (lid, qpn, 1, gid)).encode() + b'\0')
try:
    c.recv(5)
except OSError:
    pass
EOF
  server=$!
  sleep 0.3
}

# expect NAME REASON [PINGPONG ARGS...]: the client fails at RTR, by exit status 1, saying REASON.
expect() {
  local name=$1 reason=$2
  shift 2
  timeout 60 ibv_rc_pingpong -p "$port" "$@" 127.0.0.1 >"$work/out" 2>&1
  local rc=$?
  kill "$server" 2>/dev/null
  wait "$server" 2>/dev/null
  port=$((port + 1))
  if [ "$rc" -eq 1 ] && grep -q "ibv_modify_qp.*$reason" "$work/out" && grep -q "Failed to modify QP to RTR" "$work/out"; then
    echo "ok: $name: $(grep -o "ibv_modify_qp.*" "$work/out" | head -1)"
  else
    echo "FAILED: $name (exit $rc, expected 1 and \"$reason\")"
    cat "$work/out"
    failed=1
  fi
}

zero_gid=00000000000000000000000000000000
serve 4242 1 $zero_gid
expect "a LID no process holds" "no process on this host has that LID now"

serve $lid 5 $zero_gid
expect "a QP the LID's process did not publish" "the process with that LID has no such QP"

head -c 5000 /dev/urandom >"$dir/qp-$lid-6"
serve $lid 6 $zero_gid
expect "an entry of 5000 bytes" "holds more than 4096 bytes"

head -c 300 /dev/urandom >"$dir/qp-$lid-7"
serve $lid 7 $zero_gid
expect "an entry of 300 random bytes" "weft\[ofi\]"

: >"$dir/qp-$lid-8"
serve $lid 8 $zero_gid
expect "an empty entry" "the published address is empty"

ln -s /etc/passwd "$dir/qp-$lid-9"
serve $lid 9 $zero_gid
expect "an entry that is a symbolic link" "cannot open"

serve $lid 10 fe800000000000000000000000000001
expect "a GID that is no weft port's" "is not a weft port's" -g 0

# A directory other users may write decides nothing: the front end keeps to this process, and says so.
chmod 777 "$dir"
WEFT_LOG=error:compat timeout 60 ibv_devinfo >"$work/out" 2>&1
if grep -q "rendezvous: the rendezvous directory is not usable: .* is writable by other users" "$work/out"; then
  echo "ok: a rendezvous directory others may write is refused"
else
  echo "FAILED: a rendezvous directory others may write was not refused"
  cat "$work/out"
  failed=1
fi
exit $failed
