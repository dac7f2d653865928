#!/bin/bash
# --max-restarts (issue 7): `koi train --nproc 2 --max-restarts 2` supervises the ranks;
# when rank 1 is frozen with SIGSTOP the watchdog ends the job, the supervisor restarts it
# from the last checkpoint, and the run finishes bitwise equal to an uninterrupted one.
# Usage: train_mpi_restart.sh KOI SHARED_DIR
KOI=$1
SHARED=$2
source "$(dirname "$0")/train_mpi_lib.sh"
frozen=""
trap 'if [ -n "$frozen" ]; then kill -9 "$frozen" 2>/dev/null || true; fi; rm -rf "$WORK"' EXIT
STEPS=1000
write_recipe $STEPS 3

"${MPIRUN[@]}" -np 2 "$KOI" train --config "$RECIPE" --out "$WORK/ref" > /dev/null 2>&1

"$KOI" train --config "$RECIPE" --out "$WORK/run" --nproc 2 --max-restarts 2 --collective-timeout 2 \
  > "$WORK/out.txt" 2>&1 &
supervisor=$!
frozen=$(freeze_rank "$WORK/run" 30 "$supervisor") || exit 1
rc=0
wait "$supervisor" || rc=$?
[ "$rc" -eq 0 ] || { echo "FAIL: the supervised job exited $rc"; cat "$WORK/out.txt"; exit 1; }
grep -q "not responding: rank 1" "$WORK/out.txt" || { echo "FAIL: no watchdog report"; cat "$WORK/out.txt"; exit 1; }
grep -q "^supervisor: the job exited with status [0-9]*; restart 1 of 2 from the last checkpoint" "$WORK/out.txt" ||
  { echo "FAIL: no restart"; cat "$WORK/out.txt"; exit 1; }
grep -q "^resuming from .*/run/ckpt-" "$WORK/out.txt" || { echo "FAIL: did not resume"; cat "$WORK/out.txt"; exit 1; }
grep "^supervisor\|^resuming" "$WORK/out.txt"
expect_same_checkpoint "$WORK/ref" "$WORK/run" 0000$STEPS "restarted run vs uninterrupted"
echo "PASS: the supervisor restarted the job and it finished"
