"""Capture and replay on the CPU stream emulation: what torch.cuda.graph is to
ringcoll's CUDA collectives, for CPU tensors under RINGCOLL_TRANSPORT=stream, so
that CI runs the capture rules of the stream path (csrc/backend/capture.h).

    g = ringcoll.graphs.EmulatedGraph()          # the default group, or group=...
    with g.capture():
        dist.all_reduce(x)                       # recorded, not run
        dist.all_gather_into_tensor(y, x)
    for step in range(100):
        x.copy_(next_input())
        g.replay()                               # runs both, returns when done

Every rank captures the same calls, as with CUDA graphs. A capture is the capturing
thread's (as a CUDA capture is its stream's): another thread's calls run at once.
Inside the capture a collective's Work is complete and its results are not written:
they are written at each replay, which reads the tensors' values of that moment.
What cannot be captured raises at once, on every rank: a barrier, a call on a host
transport, any call with RINGCOLL_BLOCKING_WAIT=1. torch's object collectives
(all_gather_object, broadcast_object_list, ...) read their exchanges' results on the
host at once, which no backend sees: inside a capture they read buffers nothing
wrote yet (on CUDA, their host copies fail the capture); call them outside it. A
replay is watched as any collective is (the group's timeout, a peer's failure) and
raises the first failure, naming the launch's place in the graph.

On CUDA tensors use torch.cuda.graph: the same rules apply, checked by the device's
capture status, and CUDA replays the device work with no host work per replay."""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist


class EmulatedGraph:
    """Launches of one group recorded by capture() and run again by replay()."""

    def __init__(self, group=None):
        group = group if group is not None else dist.group.WORLD
        self._backend = group._get_backend(torch.device("cpu"))
        if not hasattr(self._backend, "_capture_begin"):
            raise TypeError(f"ringcoll.graphs: the group's CPU backend is "
                            f"{type(self._backend).__name__}, not ringcoll's")
        self._graph = None

    @contextlib.contextmanager
    def capture(self):
        if self._graph is not None:
            raise RuntimeError("ringcoll.graphs: this graph was captured already")
        self._backend._capture_begin()
        try:
            yield self
        finally:
            graph = self._backend._capture_end()
        self._graph = graph

    def replay(self) -> None:
        if self._graph is None:
            raise RuntimeError("ringcoll.graphs: replay() before capture()")
        self._backend._replay(self._graph)

    def __len__(self) -> int:
        return 0 if self._graph is None else len(self._graph)

    @property
    def ops(self) -> list:
        """The recorded launches, by label ("ringcoll::all_reduce #3 (rank 0 of 2)")."""
        return [] if self._graph is None else list(self._graph.ops)
