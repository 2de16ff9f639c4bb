#!/usr/bin/env bash
# Sweeps weft-verbs-rpc (verbs_rpc.c, an RPC service written against raw verbs) over seeds on the front end
# over the simulator, under a fault schedule given in the configuration, in strict mode (a misuse aborts),
# then replays runs: the same configuration must print exactly the same.
#   rpc_sweep.sh PROGRAM LIBDIR [SEEDS] [FAULTS]
# A seed passes (every request served and checked) or fails with a transport error the faults caused (the
# retries ran out: "rpc: failed at request N"); anything else (a wrong answer, a misuse, a crash) fails the
# sweep. The schedule is one that leaves some seeds failing, so that a failing seed is replayed as well as a
# passing one; several different digests among the passing seeds show that the seed decides the run.
set -euo pipefail
prog=$1
lib=$2
seeds=${3:-40}
faults=${4:-drop=0.4,duplicate=0.05,delay=0.1}
requests=200
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() {  # run SEED FILE: the program's output in FILE, its exit status returned
  local rc=0
  LD_LIBRARY_PATH=$lib WEFT_BACKEND="sim:seed=$1,strict=1,$faults" timeout 120 "$prog" weft_sim0 "$requests" \
    >"$2" 2>&1 || rc=$?
  return $rc
}

passing=()
failing=()
for seed in $(seq 1 "$seeds"); do
  rc=0
  run "$seed" "$out/$seed" || rc=$?
  last=$(tail -n 1 "$out/$seed")
  case "$rc:$last" in
    "0:rpc: $requests requests served"*) passing+=("$seed") ;;
    "1:rpc: failed at request "*) failing+=("$seed") ;;
    *)
      echo "seed $seed (sim:seed=$seed,strict=1,$faults): exit status $rc, not a served run or a transport failure:"
      cat "$out/$seed"
      exit 1
      ;;
  esac
done
echo "faults $faults, $requests requests per run: ${#passing[@]} of $seeds seeds served every request," \
  "${#failing[@]} failed when the retries ran out"
for seed in "${failing[@]:0:3}"; do echo "  seed $seed: $(tail -n 1 "$out/$seed")"; done

if [ "${#passing[@]}" -eq 0 ] || [ "${#failing[@]}" -eq 0 ]; then
  echo "the schedule must leave both passing and failing seeds to replay; choose other FAULTS"
  exit 1
fi
digests=$(for seed in "${passing[@]}"; do tail -n 1 "$out/$seed"; done | sort -u | wc -l)
echo "  ${digests} different digests among the ${#passing[@]} passing seeds"
if [ "$digests" -lt 2 ] && [ "${#passing[@]}" -ge 2 ]; then
  echo "every passing seed gave the same digest: the seed does not reach the run"
  exit 1
fi

# Replays: the first three failing seeds and the first three passing ones, byte for byte.
for seed in "${failing[@]:0:3}" "${passing[@]:0:3}"; do
  rc=0
  run "$seed" "$out/replay" || rc=$?
  if ! cmp -s "$out/$seed" "$out/replay"; then
    echo "seed $seed did not replay exactly (exit status $rc):"
    diff "$out/$seed" "$out/replay" | head -n 20
    exit 1
  fi
  echo "  seed $seed replayed exactly: $(tail -n 1 "$out/replay")"
done
