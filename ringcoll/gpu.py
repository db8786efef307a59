"""Several ranks on one GPU, for tests and benchmarks on a machine with fewer GPUs
than ranks.

NCCL refuses two ranks on one device only when it believes they share a host. Each
rank gets its own ``NCCL_HOSTID``, and NCCL's peer-to-peer and shared-memory
transports are turned off, so NCCL connects the ranks over its socket transport on
loopback. Every multi-rank CUDA path (ringcoll's and stock NCCL's) then runs for
real on one GPU. Speed in this mode is socket speed for both backends alike: a
comparison made in it is a like-for-like comparison of algorithms and per-call
overheads on the same transport, not of NVLink bandwidth.

The variables must be in each rank's environment before its first NCCL
communicator is created (set them before ``init_process_group``).
"""

from __future__ import annotations

import os

# The same for every rank; NCCL_HOSTID is added per rank.
SHARED_GPU_ENV = {
    "NCCL_P2P_DISABLE": "1",
    "NCCL_SHM_DISABLE": "1",
    "NCCL_NET": "Socket",
    "NCCL_SOCKET_IFNAME": "lo",
}


# NCCL's point-to-point over a network transport moves 128 KiB chunks by default
# (NCCL_P2P_NET_CHUNKSIZE), its ring collectives 512 KiB steps (NCCL_BUFFSIZE 4 MiB /
# 8 steps). Over the socket transport on loopback each chunk costs a fixed overhead,
# so with the default ringcoll's ncclSend/ncclRecv moved about 1.0 GB/s where NCCL's
# ring moved 1.6 (H100 run of 2026-11-23, p = 2, 16-128 MiB); with 512 KiB chunks
# both move the same chunk. It changes point-to-point only, never NCCL's ring
# collectives, and a value already in the environment wins.
P2P_CHUNK_ENV = {"NCCL_P2P_NET_CHUNKSIZE": "524288"}


def share_gpu_env(rank: int) -> dict[str, str]:
    """The environment rank `rank` needs to share a GPU with the other ranks."""
    tuning = {k: v for k, v in P2P_CHUNK_ENV.items() if k not in os.environ}
    return {**SHARED_GPU_ENV, **tuning, "NCCL_HOSTID": f"ringcoll-shared-gpu-rank{rank}"}


def device_for(rank: int, ngpu: int) -> int:
    """The GPU a rank uses: one per rank while they last, then shared round-robin."""
    if ngpu < 1:
        raise RuntimeError("no CUDA device is visible")
    return rank % ngpu
