#!/usr/bin/env bash
# The GPU session in one command, on a machine with a CUDA build of torch and >= 1 GPU:
# builds the CUDA variant of ringcoll in place, runs the GPU suite (tests/test_gpu.py:
# with one GPU its multi-rank part runs 2, 3 and 4 ranks sharing it), and with
# --bench also, under CUDA MPS where it starts, the like-for-like benchmark against
# NCCL and NCCL Ring (--share-gpu on one GPU; ringcoll's default algorithm and auto,
# 8 B-128 MiB and 256 MiB), the reduce kernel against torch.add
# (benchmarks/kernel_bw.py) and the host cost of a small all-reduce against NCCL's
# (benchmarks/gpu_host_cost.py, with each RINGCOLL_NCCL_BLOCKING: connected, 0, 1),
# and the device-side profile of a 16 MiB collective (benchmarks/gpu_profile.py).
#
#   bash tests/run_gpu.sh [--bench] [--sanitize] [pytest args...]
#
# --sanitize: compute-sanitizer memcheck and racecheck on the kernel tests and on a
# two-rank all-reduce, broadcast and reduce-scatter (tests/gpu_sanitize.py).
# pytest-xdist's -n 3 runs the suite about 3x faster on a 16-core machine.
#
# pytest args that name tests (tests/test_gpu.py::test_x[2] ...) run just those;
# otherwise (-k, -x, ... or nothing) the whole of tests/test_gpu.py runs. -v: each
# result is in the log as it happens, so a run cut at its limit still says which
# tests passed.
#
# Logs and benchmark results go to $OUT (default ./gpu-out).
# The system libstdc++ is preloaded: on images whose python loads an older one
# first, any torch extension using std::ostringstream segfaults without it.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
BENCH=0
SANITIZE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) BENCH=1; shift ;;
    --sanitize) SANITIZE=1; shift ;;
    *) break ;;
  esac
done
if [ -e /lib/x86_64-linux-gnu/libstdc++.so.6 ]; then
  export LD_PRELOAD=/lib/x86_64-linux-gnu/libstdc++.so.6${LD_PRELOAD:+:$LD_PRELOAD}
fi
export PYTHONUNBUFFERED=1
# Ranks as fresh interpreters (tests/mp.py): the fork server's preloaded torch has
# not run on a GPU yet, and spawn is what every GPU run so far used.
export TESTS_MP_START=${TESTS_MP_START:-spawn}
nvidia-smi -L | tee "$OUT/machine.txt" || true
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())" | tee -a "$OUT/machine.txt"
t0=$SECONDS
# build_ext, not pip's editable install: pip may try to fetch setuptools.
RINGCOLL_CUDA=1 MAX_JOBS=${MAX_JOBS:-16} "$PY" setup.py -q build_ext --inplace > "$OUT/build.log" 2>&1 \
  || { tail -50 "$OUT/build.log"; exit 1; }
echo "build took $(( SECONDS - t0 )) s" | tee -a "$OUT/machine.txt"
"$PY" -c "import ringcoll; print('ringcoll', ringcoll.build_info())" | tee -a "$OUT/machine.txt"
TARGET=tests/test_gpu.py
for a in "$@"; do
  case "$a" in tests/*) TARGET= ;; esac
done
rc=0
# Bounded: a hang is a failure with a message, never a stuck session.
timeout ${GPU_TEST_LIMIT_S:-1800} "$PY" -m pytest -v -rA -s $TARGET "$@" 2>&1 \
  | tee "$OUT/test_gpu.log" || rc=$?
if [ "$SANITIZE" = 1 ]; then
  {
    PT="$PY -m pytest -q -p no:cacheprovider tests/test_gpu.py -k"
    CS="timeout ${GPU_SANITIZE_LIMIT_S:-600} compute-sanitizer --error-exitcode 9"
    $CS --tool memcheck --report-api-errors no $PT "kernels or fp8 or scale" || rc=$?
    $CS --tool racecheck $PT "kernels or fp8 or scale" || rc=$?
    $CS --tool memcheck --report-api-errors no --target-processes all "$PY" tests/gpu_sanitize.py || rc=$?
    $CS --tool racecheck --kernel-name kns=ringcoll --target-processes all "$PY" tests/gpu_sanitize.py || rc=$?
  } > "$OUT/sanitizer.log" 2>&1
  grep -E "SUMMARY|passed|failed|wrong results" "$OUT/sanitizer.log"
fi
if [ "$BENCH" = 1 ]; then
  # CUDA MPS, where it can be started (root, no other CUDA process): the ranks' kernels
  # then run at once instead of time-slicing the one GPU, which otherwise sets every
  # backend's small-message time (about 2.4 ms per ring step). Stopped at the end.
  MPS=0
  if command -v nvidia-cuda-mps-control > /dev/null && nvidia-cuda-mps-control -d 2> /dev/null; then
    if timeout 60 "$PY" -c "import torch; assert (torch.ones(2, device='cuda') * 2).sum() == 4"; then
      MPS=1
    else
      echo quit | nvidia-cuda-mps-control
    fi
  fi
  echo "CUDA MPS: $MPS" | tee -a "$OUT/machine.txt"
  B="$PY -m ringcoll.bench --device cuda --share-gpu --budget ${GPU_BENCH_BUDGET_S:-0.1} -R 3 -n 3 -w 2
     --backends ringcoll,ringcoll+algo=auto,nccl,nccl-ring"
  timeout ${GPU_BENCH_LIMIT_S:-1800} $B --nproc 2,4 -b 8 -e 128M -f 8 \
    --json "$OUT/bench.json" --csv "$OUT/bench.csv" --plot "$OUT/bench.png" \
    2>&1 | tee "$OUT/bench.txt" || rc=$?
  timeout ${GPU_BENCH_LIMIT_S:-1800} $B --nproc 2,4 -b 256M -e 256M \
    --json "$OUT/bench256.json" 2>&1 | tee "$OUT/bench256.txt" || rc=$?
  timeout 120 "$PY" benchmarks/kernel_bw.py 2>&1 | tee "$OUT/kernel_bw.txt" || rc=$?
  timeout 120 "$PY" benchmarks/gpu_profile.py --out "$OUT/profile" > "$OUT/profile.txt" 2>&1 \
    || rc=$?
  for blocking in connected 0 1; do
    RINGCOLL_NCCL_BLOCKING=$blocking timeout 120 "$PY" benchmarks/gpu_host_cost.py \
      2>&1 | tee "$OUT/host_cost_nccl_blocking$blocking.txt" || rc=$?
  done
  if [ "$MPS" = 1 ]; then echo quit | nvidia-cuda-mps-control; fi
fi
exit $rc
