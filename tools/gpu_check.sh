#!/usr/bin/env bash
# One pass of the checks that need a GPU, for a lent GPU machine with a CUDA torch already installed:
# the CUDA tests, torchrun's GPU placement, the suites on every placement (tools/bench_placement.py) and
# the whole suite under HARNESS_DEVICE=auto. The CUDA step runs the nightly tier of its files too
# (torchrun's GPU placement tests live there: on a CPU machine they only repeat what the unit tests
# check). Logs go to $OUT (or ./gpu-check/). Each step has its own time limit so that one slow step
# cannot take the others' time.
#
#   bash tools/gpu_check.sh            # every step
#   STEPS="cuda suites" bash tools/gpu_check.sh
#
# The harness and its dependencies must import in that interpreter and in every process the tests start
# (their own PYTHONPATH included): install them into it (`python3 -m pip install --no-deps -e .`, and
# expecttest, junitparser, pexpect, pytest-html as wheels where the machine has no index), not with a
# PYTHONPATH of your own, which the tests' subprocesses replace.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-gpu-check}"; mkdir -p "$OUT"
PY="${PYTHON:-python3}"
STEPS="${STEPS:-env cuda suites bench all}"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=ci
J="${J:-8}"
step() { local name=$1 limit=$2; shift 2
  case " $STEPS " in *" $name "*) ;; *) return 0;; esac
  echo "=== $name (limit ${limit}s): $*"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  echo "=== $name: rc=$rc in $((SECONDS - t0)) s"; tail -n 25 "$OUT/$name.log"
}
step env 30 bash -c "nvidia-smi; $PY tools/env_report.py --no-collect-env"
step cuda 100 env DISTHARNESS_NIGHTLY=1 "$PY" run_tests.py tests/test_cuda.py tests/test_gloo_staging.py tests/test_torch_caches.py tests/test_torchrun.py tests/unit/test_cuda_state.py -j "$J" -v \
  --junit-xml "$OUT/cuda.xml"
step suites 70 "$PY" run_tests.py -j "$J" -v --junit-xml "$OUT/suites.xml"
step bench 170 "$PY" tools/bench_placement.py -- -j "$J"
step all 150 "$PY" run_tests.py --all -j "$J" --junit-xml "$OUT/all.xml"
