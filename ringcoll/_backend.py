"""The creator torch.distributed calls for every "ringcoll" process group."""

from __future__ import annotations

import torch.distributed as dist

from . import _C
from .options import Options

# Store prefix of the point-to-point gloo group each ringcoll backend creates. The
# store torch hands us is already prefixed per process group, so several ringcoll
# groups (new_group) never share keys.
_P2P_PREFIX = "ringcoll/p2p"


def create_backend(dist_backend_opts, backend_options):
    """extended_api creator: (c10d DistributedBackendOptions, pg_options)."""
    if backend_options is not None and not isinstance(backend_options, Options):
        raise TypeError(
            "ringcoll: pg_options must be a ringcoll.Options, got "
            f"{type(backend_options).__name__}"
        )
    overrides = backend_options.overrides() if backend_options is not None else {}
    store = dist_backend_opts.store
    rank = dist_backend_opts.group_rank
    size = dist_backend_opts.group_size
    timeout = dist_backend_opts.timeout
    # Validate the knobs before any rank waits on the others to connect.
    _C.knobs(overrides)
    p2p = dist.ProcessGroupGloo(dist.PrefixStore(_P2P_PREFIX, store), rank, size, timeout)
    # The group's id names its trace files (RINGCOLL_TRACE); "" on a torch without it.
    group = str(getattr(dist_backend_opts, "group_id", "") or "")
    return _C.create_backend(store, rank, size, timeout.total_seconds(), p2p, overrides, group)
