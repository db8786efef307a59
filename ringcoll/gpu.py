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

# The same for every rank; NCCL_HOSTID is added per rank.
SHARED_GPU_ENV = {
    "NCCL_P2P_DISABLE": "1",
    "NCCL_SHM_DISABLE": "1",
    "NCCL_NET": "Socket",
    "NCCL_SOCKET_IFNAME": "lo",
}


def share_gpu_env(rank: int) -> dict[str, str]:
    """The environment rank `rank` needs to share a GPU with the other ranks."""
    return {**SHARED_GPU_ENV, "NCCL_HOSTID": f"ringcoll-shared-gpu-rank{rank}"}


def device_for(rank: int, ngpu: int) -> int:
    """The GPU a rank uses: one per rank while they last, then shared round-robin."""
    if ngpu < 1:
        raise RuntimeError("no CUDA device is visible")
    return rank % ngpu
