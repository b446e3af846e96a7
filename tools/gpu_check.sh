#!/usr/bin/env bash
# One pass of the checks that need a GPU, for a lent GPU machine with a CUDA torch already installed, in at
# most 8 minutes, in two lanes at once (the machine has 16 cores; the whole suite alone needs more than the
# minutes left after the other steps, one after another):
#   lane 1: the whole suite with the nightly tier under HARNESS_DEVICE=auto (the suites at world size 1 on
#           NCCL and more ranks sharing the GPUs over gloo, the CUDA tests, the staged collectives on CUDA
#           tensors, torchrun's GPU placement), J runner processes;
#   lane 2: the suites under torchrun with 2 local ranks, then real upstream files under upstream's harness
#           and the port, file by file (tools/compare_upstream.py; its timings are taken beside lane 1, so
#           compare them with each other, not with a quiet machine's).
# Logs go to $OUT (or ./gpu-check/). Each step has its own time limit, so that one slow step cannot take the
# others' time; a step cut by its limit fails the check (rc=124), saying so.
#
#   bash tools/gpu_check.sh                       # every step
#   STEPS="cuda suites" bash tools/gpu_check.sh   # quick verdicts: the CUDA tests; the suites under auto
#   STEPS=bench bash tools/gpu_check.sh           # the placement benchmark (not in the default pass)
#
# The upstream step needs PyTorch's test/distributed files of the installed torch's release in
# upstream_samples/ (ignored by git: they are PyTorch's; on a lent machine carry them with the tree), or in the
# folder UPSTREAM_SAMPLES names (a chosen few that import on that torch: the step's budget starts no file that
# could end past it, so a large folder is cut at its first files). Without them the step says so and is skipped.
#
# The harness and its dependencies must import in that interpreter and in every process the tests start
# (their own PYTHONPATH included): install them into it (`python3 -m pip install --no-deps -e .`, and
# expecttest, junitparser, pexpect, pytest-html as wheels where the machine has no index), not with a
# PYTHONPATH of your own, which the tests' subprocesses replace.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-gpu-check}"; mkdir -p "$OUT"
PY="${PYTHON:-python3}"
STEPS="${STEPS:-env all torchrun upstream}"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=ci
J="${J:-12}"
RESULTS="$OUT/steps.txt"; : >"$RESULTS"
step() { local name=$1 limit=$2; shift 2
  case " $STEPS " in *" $name "*) ;; *) return 0;; esac
  echo "=== $name (limit ${limit}s): $*"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  echo "$name $rc" >>"$RESULTS"
  local cut=""; [ "$rc" = 124 ] && cut=" (cut by its ${limit} s limit)"
  echo "=== $name: rc=$rc in $((SECONDS - t0)) s$cut"; tail -n 25 "$OUT/$name.log"
}
step env 20 bash -c "nvidia-smi; git log --oneline -1 2>/dev/null; $PY tools/env_report.py --no-collect-env"
step cuda 90 env DISTHARNESS_NIGHTLY=1 "$PY" run_tests.py tests/test_cuda.py tests/test_gloo_staging.py tests/test_torch_caches.py \
  tests/unit/test_cuda_state.py -j "$J" -v --junit-xml "$OUT/cuda.xml"
step suites 150 env HARNESS_DEVICE=auto "$PY" run_tests.py -j "$J" -v --junit-xml "$OUT/suites.xml"
step all 420 env DISTHARNESS_NIGHTLY=1 HARNESS_DEVICE=auto "$PY" run_tests.py --all -j "$J" --junit-xml "$OUT/all.xml" \
  >"$OUT/lane1.txt" 2>&1 &
LANE1=$!
step torchrun 150 "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 run_tests.py -v
SAMPLES="${UPSTREAM_SAMPLES:-upstream_samples}"
if [ -d "$SAMPLES" ]; then
  step upstream 240 "$PY" tools/compare_upstream.py "$SAMPLES" --limit 60 --budget 210 --out "$OUT/upstream"
else
  case " $STEPS " in *" upstream "*) echo "=== upstream: skipped (no $SAMPLES/ folder of PyTorch's test/distributed files)";; esac
fi
wait "$LANE1"; cat "$OUT/lane1.txt"
step bench 170 "$PY" tools/bench_placement.py -- -j "$J"
FAILED_STEPS="$(awk '$2 != 0 {printf " %s(rc=%s)", $1, $2}' "$RESULTS")"
echo "=== gpu_check: ${SECONDS} s in all; failed steps:${FAILED_STEPS:- none}"
[ -z "$FAILED_STEPS" ]
