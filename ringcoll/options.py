"""Backend options: the knobs of csrc/common/knobs.h, settable per process group.

Pass an instance as ``pg_options`` to ``init_process_group("ringcoll", ...)`` or
``new_group(backend="ringcoll", pg_options=...)``. A field left at ``None`` keeps the
value from the environment (``RINGCOLL_*``) or the default. Values are validated in
C++ (one parser for both routes): a bad value raises when the group is created.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Options:
    algo: str | None = None  # RINGCOLL_ALGO: "rhd", "allreduce=twoshot:0-64K,ring;..."
    algo_modules: str | None = None  # RINGCOLL_ALGO_MODULES: "my_algos,path/to/more.py"
    gpu_algo: str | None = None  # RINGCOLL_GPU_ALGO: the same for CUDA tensors
    transport: str | None = None  # RINGCOLL_TRANSPORT: auto | shm | gloo | stream
    chunk_bytes: int | None = None  # RINGCOLL_CHUNK_BYTES (>= 64)
    inline_bytes: int | None = None  # RINGCOLL_INLINE_BYTES
    small_bytes: int | None = None  # RINGCOLL_SMALL_BYTES (0: no small collectives)
    spin_us: int | None = None  # RINGCOLL_SPIN_US: how long a waiting rank spins
    yield_policy: str | None = None  # RINGCOLL_YIELD: peers | never | always
    host: str | None = None  # RINGCOLL_HOST
    debug: bool | None = None  # RINGCOLL_DEBUG
    fingerprint: bool | None = None  # RINGCOLL_FINGERPRINT
    trace: str | None = None  # RINGCOLL_TRACE: a directory for per-rank trace files
    gpu_chunk_bytes: int | None = None  # RINGCOLL_GPU_CHUNK_BYTES (>= 64)
    gpu_fingerprint: bool | None = None  # RINGCOLL_GPU_FINGERPRINT (experimental)
    stop_latch_bytes: int | None = None  # RINGCOLL_STOP_LATCH_BYTES (stream paths)
    max_batches_in_flight: int | None = None  # RINGCOLL_MAX_BATCHES_IN_FLIGHT (stream paths)
    nccl_blocking: bool | str | None = None  # RINGCOLL_NCCL_BLOCKING (CUDA): connected | 0 | 1
    blocking_wait: bool | None = None  # RINGCOLL_BLOCKING_WAIT (CUDA)
    async_error_handling: str | None = None  # RINGCOLL_ASYNC_ERROR_HANDLING: teardown | raise

    def overrides(self) -> dict[str, str]:
        """The fields that are set, keyed by their environment variable name."""
        out = {}
        if self.algo is not None:
            out["RINGCOLL_ALGO"] = str(self.algo)
        if self.algo_modules is not None:
            out["RINGCOLL_ALGO_MODULES"] = str(self.algo_modules)
        if self.gpu_algo is not None:
            out["RINGCOLL_GPU_ALGO"] = str(self.gpu_algo)
        if self.transport is not None:
            out["RINGCOLL_TRANSPORT"] = str(self.transport)
        if self.chunk_bytes is not None:
            out["RINGCOLL_CHUNK_BYTES"] = str(int(self.chunk_bytes))
        if self.inline_bytes is not None:
            out["RINGCOLL_INLINE_BYTES"] = str(int(self.inline_bytes))
        if self.small_bytes is not None:
            out["RINGCOLL_SMALL_BYTES"] = str(int(self.small_bytes))
        if self.spin_us is not None:
            out["RINGCOLL_SPIN_US"] = str(int(self.spin_us))
        if self.yield_policy is not None:
            out["RINGCOLL_YIELD"] = str(self.yield_policy)
        if self.host is not None:
            out["RINGCOLL_HOST"] = str(self.host)
        if self.debug is not None:
            out["RINGCOLL_DEBUG"] = "1" if self.debug else "0"
        if self.fingerprint is not None:
            out["RINGCOLL_FINGERPRINT"] = "1" if self.fingerprint else "0"
        if self.trace is not None:
            out["RINGCOLL_TRACE"] = str(self.trace)
        if self.gpu_chunk_bytes is not None:
            out["RINGCOLL_GPU_CHUNK_BYTES"] = str(int(self.gpu_chunk_bytes))
        if self.gpu_fingerprint is not None:
            out["RINGCOLL_GPU_FINGERPRINT"] = "1" if self.gpu_fingerprint else "0"
        if self.stop_latch_bytes is not None:
            out["RINGCOLL_STOP_LATCH_BYTES"] = str(int(self.stop_latch_bytes))
        if self.max_batches_in_flight is not None:
            out["RINGCOLL_MAX_BATCHES_IN_FLIGHT"] = str(int(self.max_batches_in_flight))
        if self.nccl_blocking is not None:
            b = self.nccl_blocking
            out["RINGCOLL_NCCL_BLOCKING"] = ("1" if b else "0") if isinstance(b, bool) else str(b)
        if self.blocking_wait is not None:
            out["RINGCOLL_BLOCKING_WAIT"] = "1" if self.blocking_wait else "0"
        if self.async_error_handling is not None:
            out["RINGCOLL_ASYNC_ERROR_HANDLING"] = str(self.async_error_handling)
        return out
