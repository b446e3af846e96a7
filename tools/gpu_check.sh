#!/usr/bin/env bash
# One pass of the checks that need a GPU, for a lent GPU machine with a CUDA torch already installed, in at
# most 8 minutes: the suites under HARNESS_DEVICE=auto (world size 1 on NCCL, more ranks sharing the GPUs
# over gloo), the CUDA tests first (a quick verdict), the suites under torchrun with 2 local ranks, the whole suite with the nightly tier (the CUDA
# tests, the staged collectives on CUDA tensors, torchrun's GPU placement), and real upstream files under
# upstream's harness and the port, file by file (tools/compare_upstream.py). Logs go to $OUT (or
# ./gpu-check/). Each step has its own time limit so that one slow step cannot take the others' time.
#
#   bash tools/gpu_check.sh                       # every step
#   STEPS="suites torchrun" bash tools/gpu_check.sh
#   STEPS=bench bash tools/gpu_check.sh           # the placement benchmark (not in the default pass)
#
# The upstream step needs PyTorch's test/distributed files of the installed torch's release in
# upstream_samples/ (ignored by git: they are PyTorch's; on a lent machine carry them with the tree). Without
# them the step says so and is skipped.
#
# The harness and its dependencies must import in that interpreter and in every process the tests start
# (their own PYTHONPATH included): install them into it (`python3 -m pip install --no-deps -e .`, and
# expecttest, junitparser, pexpect, pytest-html as wheels where the machine has no index), not with a
# PYTHONPATH of your own, which the tests' subprocesses replace.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-gpu-check}"; mkdir -p "$OUT"
PY="${PYTHON:-python3}"
STEPS="${STEPS:-env cuda suites torchrun all upstream}"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=ci
J="${J:-12}"
FAILED_STEPS=""
step() { local name=$1 limit=$2; shift 2
  case " $STEPS " in *" $name "*) ;; *) return 0;; esac
  echo "=== $name (limit ${limit}s): $*"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  [ "$rc" = 0 ] || FAILED_STEPS="$FAILED_STEPS $name(rc=$rc)"
  echo "=== $name: rc=$rc in $((SECONDS - t0)) s"; tail -n 25 "$OUT/$name.log"
}
step env 20 bash -c "nvidia-smi; git log --oneline -1 2>/dev/null; $PY tools/env_report.py --no-collect-env"
step cuda 60 env DISTHARNESS_NIGHTLY=1 "$PY" run_tests.py tests/test_cuda.py tests/test_gloo_staging.py tests/test_torch_caches.py \
  tests/unit/test_cuda_state.py -j "$J" -v --junit-xml "$OUT/cuda.xml"
step suites 60 env HARNESS_DEVICE=auto "$PY" run_tests.py -j "$J" -v --junit-xml "$OUT/suites.xml"
step torchrun 110 "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 run_tests.py -v
step all 150 env DISTHARNESS_NIGHTLY=1 HARNESS_DEVICE=auto "$PY" run_tests.py --all -j "$J" --junit-xml "$OUT/all.xml"
if [ -d upstream_samples ]; then
  step upstream 80 "$PY" tools/compare_upstream.py upstream_samples --limit 60 --out "$OUT/upstream"
else
  case " $STEPS " in *" upstream "*) echo "=== upstream: skipped (no upstream_samples/ folder of PyTorch's test/distributed files)";; esac
fi
step bench 170 "$PY" tools/bench_placement.py -- -j "$J"
echo "=== gpu_check: ${SECONDS} s in all; failed steps:${FAILED_STEPS:- none}"
[ -z "$FAILED_STEPS" ]
