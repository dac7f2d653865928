# Shared by the tests/train_mpi_*.sh scripts (sourced): a tiny corpus and recipe in a temp
# directory, the mpirun command line, and loss-curve comparison.
# Expects KOI and SHARED to be set; defines WORK, RECIPE, MPIRUN and LAUNCH (arrays).
set -euo pipefail
WORK=$(mktemp -d)
head -c 60000 "$SHARED/data/tinyshakespeare.txt" > "$WORK/corpus.txt"

# write_recipe STEPS [KEEP]: the recipe every run of a test shares (2 ranks x 2 sequences),
# a checkpoint every 5 steps, the newest KEEP (default 100) kept.
write_recipe() {
  RECIPE=$WORK/tiny.yaml
  cat > "$RECIPE" <<YAML
model: {dim: 32, layers: 2, heads: 4, kv_heads: 2, ffn_dim: 64, context: 16}
data: {text: $WORK/corpus.txt, tokenizer: char}
train: {batch_size: 4, steps: $1, lr: 3.0e-3, warmup_steps: 5, seed: 7, checkpoint_interval: 5,
        keep_checkpoints: ${2:-100}, log_interval: 0, eval_iters: 2, threads: 1, out: $WORK/unused}
YAML
}

# Debian's OpenMPI in a container: ranks as root, more ranks than cores, no core binding
# (each rank has its own thread pool).
MPIRUN=(mpirun --oversubscribe --bind-to none)
if [ "$(id -u)" -eq 0 ]; then MPIRUN+=(--allow-run-as-root); fi

# losses RUN: "step loss" per line from RUN/metrics.jsonl.
losses() { sed -n 's/^{"step":\([0-9]*\),"loss":\([-0-9.e+]*\),.*/\1 \2/p' "$1/metrics.jsonl"; }

# max_loss_diff A B: the largest |loss difference| over the steps both runs logged; fails
# when they share no step.
max_loss_diff() {
  awk 'NR == FNR { a[$1] = $2; next }
       ($1 in a) { d = $2 - a[$1]; if (d < 0) d = -d; if (d > m) m = d; n++ }
       END { if (n == 0) exit 1; printf "%.2e over %d steps\n", m, n }' <(losses "$1") <(losses "$2")
}

# expect_close A B TOL WHAT: fails the test unless every shared step's loss is within TOL.
expect_close() {
  local out
  out=$(max_loss_diff "$1" "$2") || { echo "FAIL: $4: no common steps"; exit 1; }
  echo "$4: max |loss diff| $out"
  awk -v d="${out%% *}" -v tol="$3" 'BEGIN { exit !(d + 0 <= tol + 0) }' || { echo "FAIL: $4 exceeds $3"; exit 1; }
}

# expect_same_checkpoint A B STEP WHAT: weights and optimizer state are byte for byte equal.
expect_same_checkpoint() {
  local f
  for f in model.safetensors optimizer.safetensors; do
    cmp "$1/ckpt-$3/$f" "$2/ckpt-$3/$f" || { echo "FAIL: $4: $f differs"; exit 1; }
  done
  echo "$4: checkpoint $3 identical"
}

# rank_pid PARENT_PATTERN RANK: the pid of the koi process of that MPI rank whose command
# line contains PARENT_PATTERN (the run directory).
rank_pid() {
  local p
  for p in $(pgrep -f -- "$1"); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" &&
       tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q "koi train"; then
      echo "$p"
      return 0
    fi
  done
  return 1
}

# wait_for_step RUN STEP PID: until RUN/metrics.jsonl logged STEP (fails if PID exits first).
wait_for_step() {
  local step
  while kill -0 "$3" 2>/dev/null; do
    step=$(losses "$1" 2>/dev/null | tail -n 1 | cut -d' ' -f1 || true)
    if [ -n "$step" ] && [ "$step" -ge "$2" ]; then return 0; fi
    sleep 0.01
  done
  echo "FAIL: the run ended before step $2"
  exit 1
}

# run CMD...: runs CMD with its output in WORK/last.txt; on failure prints it and fails the test.
run() { "$@" > "$WORK/last.txt" 2>&1 || { echo "FAIL: $*"; cat "$WORK/last.txt"; exit 1; }; }

# launch NP: the command that starts koi on NP ranks (0: one process without mpirun), in LAUNCH.
launch() {
  LAUNCH=("$KOI")
  if [ "$1" -gt 0 ]; then LAUNCH=("${MPIRUN[@]}" -np "$1" "$KOI"); fi
}

# run_curve NAME NP [ARGS...]: trains RECIPE in WORK/NAME on NP ranks (0: one process) with
# ARGS, its output in WORK/NAME.txt; on failure prints it and fails the test.
run_curve() {
  local name=$1
  launch "$2"
  shift 2
  "${LAUNCH[@]}" train --config "$RECIPE" --out "$WORK/$name" "$@" > "$WORK/$name.txt" 2>&1 ||
    { echo "FAIL: $name ($*)"; cat "$WORK/$name.txt"; exit 1; }
}

# expect_refused MESSAGE NP [ARGS...]: koi train of RECIPE on NP ranks (0: one process) with
# ARGS must fail at start with MESSAGE (a fixed string) in its output.
expect_refused() {
  local message=$1
  launch "$2"
  shift 2
  if "${LAUNCH[@]}" train --config "$RECIPE" --out "$WORK/refused" "$@" > "$WORK/refused.txt" 2>&1; then
    echo "FAIL: accepted: $*"; exit 1
  fi
  grep -qF -- "$message" "$WORK/refused.txt" || { echo "FAIL: $* gave no '$message'"; cat "$WORK/refused.txt"; exit 1; }
  echo "refused as expected: $*"
}

# resume_from RUN NAME NP [ARGS...]: RUN's step-10 checkpoint resumed in WORK/NAME on NP ranks
# (0: one process without mpirun) with ARGS; fails unless it resumed there and went on at 11.
resume_from() {
  local from=$1 name=$2 np=$3
  shift 3
  mkdir "$WORK/$name"
  cp -r "$WORK/$from/ckpt-00000010" "$WORK/$name/"
  launch "$np"
  run "${LAUNCH[@]}" train --config "$RECIPE" --out "$WORK/$name" --resume "$@"
  grep -q "resuming from .*ckpt-00000010" "$WORK/last.txt" || { echo "FAIL: $name did not resume"; exit 1; }
  [ "$(losses "$WORK/$name" | head -n 1 | cut -d' ' -f1)" -eq 11 ] || { echo "FAIL: $name did not start at 11"; exit 1; }
}

# freeze_rank RUN STEP PID: once RUN/metrics.jsonl logged STEP (PID: the launcher, which must
# not exit first), stops rank 1's koi process with SIGSTOP and prints its pid.
freeze_rank() {
  wait_for_step "$1" "$2" "$3" >&2
  local pid
  pid=$(rank_pid "$1" 1) || { echo "FAIL: rank 1 not found" >&2; return 1; }
  kill -STOP "$pid"
  echo "$pid"
}
