#!/usr/bin/env bash
# A GPU session's checks and measurements in one bounded command, on a machine with
# one GPU and a CUDA build of torch (the device machine's image): the steps named on
# the command line, in this order, each under its own time limit, logs and results
# in $OUT (default gpu-out; at most eight files, the device tool's limit).
#
#   bash benchmarks/gpu_session.sh build hostcost ab tests large memcheck
#
#   build     the CUDA variant in place (setup.py build_ext; pip may try to fetch)
#   tests     tests/test_gpu.py, 2-4 ranks sharing the GPU (pytest-xdist -n 4;
#             TEST_SELECT: a -k expression for a part of it)
#   memcheck  compute-sanitizer memcheck on tests/gpu_sanitize.py (3 ranks)
#   hostcost  benchmarks/gpu_host_cost.py: both views of a small all-reduce and
#             ringcoll's per-call breakdown beside NCCL's, p = 2 and 4
#   ab        ringcoll.bench, each algorithm side by side with NCCL Ring, 8 B-2 MiB,
#             p = 2, 3, 4 (the default's limits and the GPU calibration come from it)
#   large     ringcoll.bench, 16-128 MiB, the default and 32 MiB segments
#             (RINGCOLL_GPU_CHUNK_BYTES) side by side with NCCL Ring
#   final     ringcoll.bench, the default against NCCL Ring, 8 B-128 MiB by 64x,
#             p = 2, 3, 4 (the issue's grid)
#   graphs    ringcoll.bench -G 20: 8 B-64 KiB, each call eager and 20 captured in a
#             CUDA graph per replay, ringcoll and NCCL Ring (issue 48's graph targets)
#   pyalgos   ringcoll.bench all-reduce: pyring, swing and twolevel (Python) beside
#             the built-in ring and NCCL Ring, 8 B-32 MiB
# The benchmarks run under CUDA MPS (started here, stopped at the end); the tests
# and the sanitizer without it (compute-sanitizer does not run under MPS).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
LOG="$OUT/session.log"
if [ -e /lib/x86_64-linux-gnu/libstdc++.so.6 ]; then
  export LD_PRELOAD=/lib/x86_64-linux-gnu/libstdc++.so.6${LD_PRELOAD:+:$LD_PRELOAD}
fi
export PYTHONUNBUFFERED=1
# Ranks as fresh interpreters (tests/mp.py): the fork server's preloaded torch has
# not run on a GPU yet, and spawn is what every GPU run so far used.
export TESTS_MP_START=${TESTS_MP_START:-spawn}
say() { echo "[$(date +%T) +$SECONDS s] $*" | tee -a "$LOG"; }
rc=0
MPS=0
mps_on() {
  [ "$MPS" = 1 ] && return
  if command -v nvidia-cuda-mps-control > /dev/null && nvidia-cuda-mps-control -d 2> /dev/null; then
    MPS=1
  fi
  say "CUDA MPS: $MPS"
}
mps_off() {
  if [ "$MPS" = 1 ]; then echo quit | nvidia-cuda-mps-control; MPS=0; sleep 1; say "CUDA MPS: 0"; fi
}
trap mps_off EXIT
nvidia-smi -L >> "$LOG" 2>&1
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())" >> "$LOG" 2>&1
git log -1 --format='ringcoll %H %s' >> "$LOG" 2>/dev/null || true
BENCH="$PY -m ringcoll.bench --device cuda --share-gpu --budget 0.05 -R 3 -n 3 -w 2 --nproc 2,3,4"
for step in "$@"; do
  say "== $step"
  case "$step" in
    build)
      RINGCOLL_CUDA=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} MAX_JOBS=${MAX_JOBS:-16} \
        timeout 300 "$PY" setup.py -q build_ext --inplace >> "$LOG" 2>&1 \
        || { tail -40 "$LOG"; exit 1; }
      "$PY" -c "import ringcoll; print('ringcoll', ringcoll.build_info())" 2>&1 | tee -a "$LOG" ;;
    tests)
      mps_off
      timeout ${TEST_LIMIT_S:-260} "$PY" -m pytest -q -rfE -n ${TEST_WORKERS:-4} \
        ${TEST_SELECT:+-k "$TEST_SELECT"} tests/test_gpu.py \
        > "$OUT/test_gpu.log" 2>&1 || rc=1
      tail -15 "$OUT/test_gpu.log" | tee -a "$LOG" ;;
    memcheck)
      mps_off
      timeout ${MEMCHECK_LIMIT_S:-150} compute-sanitizer --tool memcheck --report-api-errors no \
        --target-processes all --error-exitcode 9 "$PY" tests/gpu_sanitize.py \
        > "$OUT/memcheck.log" 2>&1 || rc=1
      grep -E "ERROR SUMMARY|wrong results" "$OUT/memcheck.log" | tee -a "$LOG" ;;
    hostcost)
      mps_on
      timeout ${HOSTCOST_LIMIT_S:-150} "$PY" benchmarks/gpu_host_cost.py --nproc 2 4 \
        --sizes 8 65536 --calls 20 --rounds 3 \
        --variants ${HOSTCOST_VARIANTS:-ringcoll,ringcoll+gpu_algo=ring,ringcoll+gpu_algo=twoshot} \
        > "$OUT/host_cost.txt" 2>&1 || rc=1
      cat "$OUT/host_cost.txt" >> "$LOG" ;;
    ab)
      mps_on
      timeout ${AB_LIMIT_S:-300} $BENCH -b 8 -e 2M -f 8 \
        --backends ringcoll,ringcoll+gpu_algo=ring,ringcoll+gpu_algo=oneshot,ringcoll+gpu_algo=twoshot,ringcoll+gpu_algo=rhd,nccl-ring \
        --json "$OUT/ab.json" --csv "" --plot "" > "$OUT/ab.txt" 2>&1 || rc=1
      grep -E "^#|ratio" "$OUT/ab.txt" | tail -5 | tee -a "$LOG" ;;
    large)
      mps_on
      timeout ${LARGE_LIMIT_S:-200} $BENCH -b 16M -e 128M -f 8 \
        --backends ringcoll,ringcoll+gpu_chunk_bytes=32M,nccl-ring \
        --json "$OUT/large.json" --csv "" --plot "" > "$OUT/large.txt" 2>&1 || rc=1
      grep -E "busbw GB/s" "$OUT/large.txt" | tee -a "$LOG" ;;
    final)
      mps_on
      timeout ${FINAL_LIMIT_S:-300} $BENCH -b 8 -e 128M -f 64 --backends ringcoll,nccl-ring \
        --json "$OUT/final.json" --csv "" --plot "" > "$OUT/final.txt" 2>&1 || rc=1
      tail -40 "$OUT/final.txt" | tee -a "$LOG" ;;
    graphs)
      # Issue 48's graph mode: K = 20 calls captured per replay, beside the eager calls
      mps_on
      timeout ${GRAPHS_LIMIT_S:-300} $BENCH -b 8 -e 64K -f 8 -G 20 --backends ringcoll,nccl-ring \
        --json "$OUT/graphs.json" --csv "" --plot "" > "$OUT/graphs.txt" 2>&1 || rc=1
      grep -E " graph " "$OUT/graphs.txt" | tail -30 | tee -a "$LOG" ;;
    pyalgos)
      # The algorithms written in Python on CUDA tensors beside the built-in ring
      mps_on
      RINGCOLL_ALGO_MODULES=examples/pyring.py timeout ${PYALGOS_LIMIT_S:-300} $BENCH \
        -b 8 -e 32M -f 64 --collectives all_reduce \
        --backends ringcoll,ringcoll+gpu_algo=pyring,ringcoll+gpu_algo=swing,ringcoll+gpu_algo=twolevel,nccl-ring \
        --json "$OUT/pyalgos.json" --csv "" --plot "" > "$OUT/pyalgos.txt" 2>&1 || rc=1
      grep -E "busbw GB/s" "$OUT/pyalgos.txt" | tee -a "$LOG" ;;
    *) say "unknown step $step"; rc=1 ;;
  esac
done
say "done, rc=$rc"
exit $rc
