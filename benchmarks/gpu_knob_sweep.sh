#!/usr/bin/env bash
# Knob sweep on a GPU in the one-GPU multi-rank mode (--share-gpu): ringcoll's
# all-reduce at large sizes under different NCCL point-to-point settings, beside
# NCCL_ALGO=Ring, each in a world of its own. What it is for: finding what keeps
# ringcoll's ncclSend/ncclRecv slower per byte than NCCL's ring over the same socket
# transport (benchmarks/results/README.md, "GPU").
#
#   bash benchmarks/gpu_knob_sweep.sh [P] [MINBYTES] [MAXBYTES]
#
# Needs a CUDA build of ringcoll in place (tests/run_gpu.sh builds it). Tables go to
# stdout, one JSON per setting to $OUT (default ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
# As tests/run_gpu.sh: images whose python loads an older libstdc++ first need this.
if [ -e /lib/x86_64-linux-gnu/libstdc++.so.6 ]; then
  export LD_PRELOAD=/lib/x86_64-linux-gnu/libstdc++.so.6${LD_PRELOAD:+:$LD_PRELOAD}
fi
export PYTHONUNBUFFERED=1
P=${1:-2}
MIN=${2:-16M}
MAX=${3:-128M}
bench() {  # name, backends, then VAR=value... for that run
  local name=$1 backends=$2
  shift 2
  echo "=== $name: $* (p=$P)"
  env "$@" timeout 120 "$PY" -m ringcoll.bench --device cuda --share-gpu --nproc "$P" \
    -b "$MIN" -e "$MAX" -f 8 --collectives all_reduce --backends "$backends" \
    --budget 0.3 -R 3 -n 2 -w 1 --json "$OUT/sweep-p$P-$name.json" 2>&1 \
    | grep -E "^ +[0-9]+ +[0-9]+ +float32|Error|error" | head -20
}
# 131072 is NCCL's own default: ringcoll/gpu.py sets 524288 where the variable is unset.
bench nccl-ring nccl-ring NCCL_P2P_NET_CHUNKSIZE=131072
bench default ringcoll NCCL_P2P_NET_CHUNKSIZE=131072
# Channels per network peer: the 2026-11-23 sweep set them through ringcoll's own
# communicator config (ncclConfig_t.nChannelsPerNetPeer, a knob since removed: no
# effect); the environment variable sets the same NCCL parameter process-wide.
for ch in 1 4 8; do
  bench "ch$ch" ringcoll NCCL_NCHANNELS_PER_NET_PEER=$ch NCCL_P2P_NET_CHUNKSIZE=131072
done
for cs in 524288 2097152; do bench "chunk$cs" ringcoll NCCL_P2P_NET_CHUNKSIZE=$cs; done
bench "ch4-chunk524288" ringcoll NCCL_NCHANNELS_PER_NET_PEER=4 NCCL_P2P_NET_CHUNKSIZE=524288
bench "seg128M" ringcoll RINGCOLL_GPU_CHUNK_BYTES=134217728 NCCL_P2P_NET_CHUNKSIZE=131072
