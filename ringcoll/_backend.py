"""The creator torch.distributed calls for every "ringcoll" process group."""

from __future__ import annotations

import os
import sys

import torch.distributed as dist

from . import _C, schedules
from .options import Options

# Store prefix of the point-to-point gloo group each ringcoll backend creates. The
# store torch hands us is already prefixed per process group, so several ringcoll
# groups (new_group) never share keys.
_P2P_PREFIX = "ringcoll/p2p"
# Store keys of RINGCOLL_ALGO=auto's resolution (same per-group prefixing).
_AUTO_HOST = "ringcoll/auto/host/"
_AUTO_VALUE = "ringcoll/auto/value"
_AUTO_GPU_VALUE = "ringcoll/auto/gpu-value"
_AUTO_DROPPED = "ringcoll/auto/dropped"


def _knob(overrides, name, default=None):
    return overrides.get(name, os.environ.get(name, default))


def _resolve_auto(overrides, store, rank, size):
    """RINGCOLL_ALGO and RINGCOLL_GPU_ALGO with `auto` replaced by the cost model's
    choice (model/auto.py).

    Rank 0 resolves them and shares the values through the store, so every rank
    runs the same selection even if their calibration files or environments differ.
    RINGCOLL_ALGO is resolved for the host transport: RINGCOLL_TRANSPORT if it
    names one (shm, gloo), else (auto, or stream, which emulates the GPU path over
    auto's links) shm when every rank shares rank 0's host (the identity the
    backend uses: RINGCOLL_HOST, else hostname and boot id) and gloo otherwise (the
    slowest link class; a mixed topology is modelled as all gloo); a group of one
    rank has no links, and is priced as shm (what it costs is its overhead alone).
    CUDA tensors' choice (RINGCOLL_GPU_ALGO, which follows RINGCOLL_ALGO when unset)
    is resolved for the "nccl" transport: the calibration's, else the built-in GPU
    constants (model.GPU_LINK), with this group's GPU segment size and header
    setting. A candidate whose schedules cannot be built for this group (a Python
    algorithm's function raises for this p) drops out of the choice; RINGCOLL_DEBUG
    prints which and why, on every rank."""
    import dataclasses

    from .model import DEFAULTS, auto, load

    value = _knob(overrides, "RINGCOLL_ALGO", "ring")
    gpu_value = _knob(overrides, "RINGCOLL_GPU_ALGO")
    if gpu_value is None and _knob(overrides, "RINGCOLL_ALGO") is not None:
        gpu_value = value
    if not auto.wants_auto(value) and not auto.wants_auto(gpu_value):
        return overrides
    # the other knobs, before they are used
    _C.knobs({**overrides, "RINGCOLL_ALGO": "ring", "RINGCOLL_GPU_ALGO": "ring"})
    transport = _knob(overrides, "RINGCOLL_TRANSPORT", "auto")
    if transport not in ("shm", "gloo"):  # auto's links (stream rides on them too)
        transport = "auto" if size > 1 else "shm"
    # The host transport matters only to a host choice that wants auto (every rank
    # agrees on that: the knobs are shared).
    find_hosts = transport == "auto" and auto.wants_auto(value)
    if find_hosts:
        store.set(_AUTO_HOST + str(rank), _knob(overrides, "RINGCOLL_HOST") or _C.this_host())
    dropped = {}
    if rank == 0:
        if find_hosts:
            hosts = {store.get(_AUTO_HOST + str(r)).decode() for r in range(size)}
            transport = "shm" if len(hosts) <= 1 else "gloo"
        elif transport == "auto":  # only CUDA tensors' choice wants auto
            transport = "shm"
        try:
            # Predicted with this group's segment sizes and fingerprint settings.
            cal = load()
            on = ("1", "true")
            fingerprint = _knob(overrides, "RINGCOLL_FINGERPRINT", "1") in on
            gpu = cal.transports.get("nccl") or DEFAULTS.transports["nccl"]
            gpu = dataclasses.replace(
                gpu, chunk_bytes=int(_knob(overrides, "RINGCOLL_GPU_CHUNK_BYTES", 8 << 20)),
                fingerprint=int(fingerprint and
                                _knob(overrides, "RINGCOLL_GPU_FINGERPRINT", "0") in on))
            cal = dataclasses.replace(
                cal, chunk_bytes=int(_knob(overrides, "RINGCOLL_CHUNK_BYTES", cal.chunk_bytes)),
                fingerprint=fingerprint, transports={**cal.transports, "nccl": gpu})
            resolved = auto.resolve(value, size, transport, cal, dropped)
            gpu_resolved = (auto.resolve(gpu_value, size, "nccl", cal, dropped)
                            if gpu_value is not None else "")
        except Exception as e:  # noqa: BLE001 - a Python algorithm's error too
            # Every rank raises the same error (the others wait on the store for it).
            why = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
            resolved = gpu_resolved = "!" + why
        left_out = auto.left_out(dropped)
        store.set(_AUTO_DROPPED, left_out)
        store.set(_AUTO_VALUE, resolved)
        store.set(_AUTO_GPU_VALUE, gpu_resolved)
    else:
        resolved = store.get(_AUTO_VALUE).decode()
        gpu_resolved = store.get(_AUTO_GPU_VALUE).decode()
        left_out = store.get(_AUTO_DROPPED).decode()
    if resolved.startswith("!"):
        raise ValueError(f"ringcoll: {resolved[1:]}")
    out = dict(overrides)
    if auto.wants_auto(value):  # else unset stays unset (it turns the small path off)
        out["RINGCOLL_ALGO"] = resolved
    if gpu_resolved:
        out["RINGCOLL_GPU_ALGO"] = gpu_resolved
    if _knob(overrides, "RINGCOLL_DEBUG", "0") in ("1", "true"):
        print(f"[ringcoll rank {rank}/{size}] RINGCOLL_ALGO={value} resolved to {resolved}"
              + (f"; for CUDA tensors RINGCOLL_GPU_ALGO={gpu_value} resolved to {gpu_resolved}"
                 if gpu_resolved else "")
              + (f"; left out of auto's choice: {left_out}" if left_out else ""),
              file=sys.stderr, flush=True)
    return out


def create_backend(dist_backend_opts, backend_options):
    """extended_api creator: (c10d DistributedBackendOptions, pg_options)."""
    if backend_options is not None and not isinstance(backend_options, Options):
        raise TypeError(
            "ringcoll: pg_options must be a ringcoll.Options, got "
            f"{type(backend_options).__name__}"
        )
    overrides = backend_options.overrides() if backend_options is not None else {}
    # Algorithms written in Python, before RINGCOLL_ALGO (or auto) names them: every
    # rank's process runs this, torchrun's workers too.
    schedules.load_modules(_knob(overrides, "RINGCOLL_ALGO_MODULES"))
    store = dist_backend_opts.store
    rank = dist_backend_opts.group_rank
    size = dist_backend_opts.group_size
    timeout = dist_backend_opts.timeout
    overrides = _resolve_auto(overrides, store, rank, size)
    # Validate the knobs before any rank waits on the others to connect.
    _C.knobs(overrides)
    p2p = dist.ProcessGroupGloo(dist.PrefixStore(_P2P_PREFIX, store), rank, size, timeout)
    # The group's id names its trace files (RINGCOLL_TRACE); "" on a torch without it.
    group = str(getattr(dist_backend_opts, "group_id", "") or "")
    # Each rank's rank in the default group (the flight recorder's dumps name them).
    global_ranks = list(getattr(dist_backend_opts, "global_ranks_in_group", None) or [])
    if len(global_ranks) != size:
        global_ranks = []
    return _C.create_backend(store, rank, size, timeout.total_seconds(), p2p, overrides, group,
                             global_ranks)
