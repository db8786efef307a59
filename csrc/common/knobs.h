// Every ringcoll knob, in one place. Each is read once, when a backend is created,
// from the environment and then from the explicit overrides passed through
// ringcoll.Options (pg_options of init_process_group / new_group), which win.
//
//   field        variable               default  meaning
//   algo         RINGCOLL_ALGO          ring     algorithm(s) from schedules/registry.cc: one
//                                                name for every collective, or per
//                                                collective and byte-size range, e.g.
//                                                allreduce=twoshot:0-64K,rhd:64K-1M,ring;
//                                                broadcast=tree (grammar: schedules/select.h),
//                                                or auto: the cost model's choice for
//                                                this p and transport, resolved by the
//                                                Python creator (ringcoll/model/auto.py)
//   gpuAlgo      RINGCOLL_GPU_ALGO      (algo)   the same for CUDA tensors; unset: algo's
//                                                value, except that auto (whose model is
//                                                calibrated on the CPU transports) runs
//                                                ring on CUDA tensors
//   transport    RINGCOLL_TRANSPORT     auto     CPU tensors: auto (shared memory within
//                                                a host, gloo between hosts) | shm | gloo
//                                                | stream: the CPU emulation of the GPU
//                                                path's stream semantics over auto's
//                                                links (transport/cpu_stream_transport.h),
//                                                for tests
//   streamDelayUs RINGCOLL_STREAM_DELAY_US 0     stream: every task of the emulated
//                                                streams starts after a random pause of
//                                                up to this many microseconds, so races
//                                                show
//   streamFailAfter RINGCOLL_STREAM_FAIL_AFTER 0 stream, tests only: the N-th batch this
//                                                rank enqueues throws instead (a failure
//                                                in the middle of enqueuing a
//                                                collective); 0: never
//   chunkBytes   RINGCOLL_CHUNK_BYTES   1048576  largest single message (a segment, in
//                                                whole elements); at least 64; each
//                                                shared-memory slot and gloo staging
//                                                buffer is this size
//   gpuChunkBytes RINGCOLL_GPU_CHUNK_BYTES 8388608  the same for CUDA tensors (the NCCL
//                                                transport's segment and staging
//                                                buffer). Larger than the CPU one: each
//                                                segment is one ncclGroup launch (about
//                                                100 us of host time). Not larger: on
//                                                an H200 (measured, not yet explained;
//                                                a segment's transfer does wait for the
//                                                previous one's reduction)
//                                                8 MiB beat 32 and 128 MiB for
//                                                reduce-scatter and all-reduce at
//                                                128 MiB (1.1-1.3x) and matched them at
//                                                16 MiB (benchmarks/results/
//                                                gpu-segments-h200-mps.txt)
//   gpuFingerprint RINGCOLL_GPU_FINGERPRINT 0    1: CUDA collectives carry the header
//                                                too, in a batch of their own, compared
//                                                on the device (engine/executor.h); off
//                                                by default until a GPU run shows it
//                                                free of false mismatches (the stream
//                                                emulation runs it on by default)
//   stopLatchBytes RINGCOLL_STOP_LATCH_BYTES 16384  stream paths (CUDA and its
//                                                emulation): a kernel writing more than
//                                                this reads the stop word's device
//                                                copy, latched once after each wait for
//                                                transfers, not the host-mapped word in
//                                                each block (reduce/reducer.h); 16 KiB
//                                                is two blocks of the CUDA kernels. A
//                                                huge value (1073741824): every kernel
//                                                reads the host word, as before (A/B)
//   maxBatchesInFlight RINGCOLL_MAX_BATCHES_IN_FLIGHT 64  stream paths (CUDA and its
//                                                emulation): a batch (NCCL group) is not
//                                                enqueued while this many are in flight;
//                                                the launching thread waits, holding no
//                                                lock, so that a launch never blocks
//                                                under the communicator's lock behind a
//                                                stuck peer and the watchdog can always
//                                                abort (transport/stream_transport.h).
//                                                64 batches of at most five launches
//                                                each stay well inside a CUDA stream's
//                                                launch queue (about a thousand). 0:
//                                                unbounded
//   ncclBlocking RINGCOLL_NCCL_BLOCKING connected  CUDA: how the NCCL communicator
//                                                blocks. connected (default): created
//                                                and connected non-blocking, so the
//                                                watchdog can time out and abort a
//                                                creation or connection that waits for
//                                                a missing rank; then the collectives
//                                                run on a blocking communicator split
//                                                off it, sharing its connections
//                                                (ncclCommSplit, splitShare), because a
//                                                non-blocking one makes NCCL start a
//                                                thread at every batch's ncclGroupEnd
//                                                (one per wave: 150-300 us a call).
//                                                Point-to-point's communicator, which
//                                                connects at first use, stays
//                                                non-blocking. 0: non-blocking
//                                                throughout; 1: blocking throughout (a
//                                                rank that never creates its
//                                                communicator then hangs the others',
//                                                as with ProcessGroupNCCL's default).
//                                                Every rank must agree (it is compared)
//   blockingWait RINGCOLL_BLOCKING_WAIT 0        CUDA: 1: Work.wait() blocks the host
//                                                until the collective finished and
//                                                raises on failure or timeout; 0: it
//                                                orders the caller's stream (the
//                                                default, as ProcessGroupNCCL)
//   asyncErrorHandling RINGCOLL_ASYNC_ERROR_HANDLING teardown  CUDA, when wait()
//                                                does not block: what the watchdog does
//                                                on a timeout or NCCL error after
//                                                aborting the communicator. teardown:
//                                                print the error (op, sequence number,
//                                                rank, peer) to stderr and end the
//                                                process (SIGABRT), as ProcessGroupNCCL
//                                                does, so no wrong result is used;
//                                                raise: fail the Work and raise at the
//                                                next call on the group
//   inlineBytes  RINGCOLL_INLINE_BYTES  2097152  blocking CPU collectives up to this
//                                                size run on the calling thread when
//                                                nothing else is queued (no thread
//                                                hand-off; a late peer hands them to the
//                                                worker after 2 ms); async_op=True ones
//                                                only up to 256 KiB (backend.cc's
//                                                kAsyncInlineBytes), so that they overlap
//                                                the caller's work; 0: never. Why 2 MiB:
//                                                benchmarks/results/inline-bytes-cpu.txt
//   smallBytes   RINGCOLL_SMALL_BYTES   65536    CPU all-reduces, reduce-scatters,
//                                                all-gathers and broadcasts whose buffer
//                                                is up to this size (PREMUL_SUM
//                                                excepted) run as small collectives
//                                                (engine/small.h): one message per pair
//                                                of ranks, the header folded in, no
//                                                schedule. Only where
//                                                RINGCOLL_ALGO is not set (a named
//                                                algorithm always runs as named) and on
//                                                shared memory between every pair of
//                                                ranks; 0: never
//   spinUs       RINGCOLL_SPIN_US       100      CPU: how long a rank with nothing to do
//                                                spins before it sleeps on a futex
//                                                (transport/doorbell.h); 0: it sleeps at
//                                                once. Chosen by measurement, idle and
//                                                under load: docs/WAITING.md
//   yield        RINGCOLL_YIELD         peers    CPU: whom a spinning rank hands its
//                                                core to: peers (a rank of its group
//                                                that last ran on this core and has
//                                                work: ranks outnumbering cores), never
//                                                (spin out the budget, as MPI libraries
//                                                do), always (sched_yield every half
//                                                microsecond: the old policy, which
//                                                under load hands a busy process a
//                                                whole scheduler slice; for A/B runs)
//   host         RINGCOLL_HOST          (auto)   this rank's host identity; ranks with
//                                                the same one share memory. Default:
//                                                hostname and boot id. Tests set it to
//                                                pretend ranks live on different hosts
//   debug        RINGCOLL_DEBUG         0        1: log every collective to stderr,
//                                                with the algorithm it ran and why
//   fingerprint  RINGCOLL_FINGERPRINT   1        1: every CPU collective opens with the
//                                                64-byte header exchange that catches
//                                                ranks disagreeing about it
//                                                (engine/fingerprint.h); 0: skip it, to
//                                                measure what it costs
//   trace        RINGCOLL_TRACE         (off)    a directory: every rank writes a
//                                                Chrome/Perfetto trace of each
//                                                collective's steps there
//                                                (backend/trace_writer.h; merge with
//                                                python -m ringcoll.trace DIR); created
//                                                if missing; empty: off
//   (Python)     RINGCOLL_MODEL         (none)   the cost model calibration (JSON, from
//                                                python -m ringcoll.model --calibrate)
//                                                that auto and ringcoll.model use; unset:
//                                                the constants in ringcoll/model
//   (Python)     RINGCOLL_ALGO_MODULES  (none)   modules that define algorithms in
//                                                Python (ringcoll/schedules), comma-
//                                                separated: dotted names (imported as
//                                                import would) or paths of .py files.
//                                                Every process group creation imports
//                                                them first, on every rank (torchrun's
//                                                workers included), and so do python -m
//                                                ringcoll.check, .sim, .bench and .model,
//                                                so RINGCOLL_ALGO may name what they
//                                                define
//   (process)    RINGCOLL_CHECKS        0        1: debug checks of ringcoll's own rules
//                                                abort the process naming the breach: a
//                                                ringcoll lock held where Python may run
//                                                (a tensor freed, a future's callbacks;
//                                                common/locks.h), an unfinished stream
//                                                Work's memory freed while its device
//                                                may still use it; read once per
//                                                process; the test suite sets it
//
// A bad value is an error naming the variable, the value and what is accepted. (The
// RINGCOLL_ALGO value is parsed against the registry where algorithms live,
// schedules/select.h.)
//
// A RINGCOLL_* name that is not a knob (docs/KNOBS.md, "Unknown variables"):
// - the project's own variables that the backend does not read (RINGCOLL_CUDA and
//   RINGCOLL_SANITIZE for the build, RINGCOLL_MODEL for Python, RINGCOLL_CI_CACHE
//   for CI) pass silently;
// - in the environment, a name within two edits of a knob (RINGCOLL_ALOG) is an
//   error naming that knob: a typo must never run the default silently;
// - in the environment, any other name is ignored with one warning per process on
//   stderr naming the closest knob, as NCCL does with variables it does not know:
//   the prefix is shared with scripts and tools that set their own variables, and
//   a variable ringcoll never reads must not stop a job;
// - as an override (ringcoll.Options, _C.knobs), an unknown name is an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace ringcoll {

struct Knobs {
  std::string algo = "ring";
  std::string gpuAlgo;  // "" = algo's
  std::string transport = "auto";
  size_t chunkBytes = size_t{1} << 20;
  size_t gpuChunkBytes = size_t{8} << 20;
  bool gpuFingerprint = false;
  size_t stopLatchBytes = size_t{16} << 10;
  size_t maxBatchesInFlight = 64;
  // RINGCOLL_NCCL_BLOCKING: 0 | 1 | connected (above).
  enum class NcclBlocking { kNever, kAlways, kOnceConnected };
  NcclBlocking ncclBlocking = NcclBlocking::kOnceConnected;
  bool blockingWait = false;
  std::string asyncErrorHandling = "teardown";
  size_t inlineBytes = size_t{2} << 20;
  size_t smallBytes = size_t{64} << 10;
  bool algoSet = false;  // RINGCOLL_ALGO was given (environment or override)
  uint32_t spinUs = 100;
  std::string yield = "peers";
  uint32_t streamDelayUs = 0;
  size_t streamFailAfter = 0;
  std::string host;
  bool debug = false;
  bool fingerprint = true;
  std::string trace;  // "" = off

  static constexpr size_t kMinChunkBytes = 64;

  // Environment, then overrides (keys are the variable names, e.g.
  // "RINGCOLL_ALGO"). Throws std::invalid_argument on any bad name or value.
  static Knobs load(const std::map<std::string, std::string>& overrides);

  // "RINGCOLL_ALGO=ring RINGCOLL_TRANSPORT=auto ..." for logs and tests.
  std::string describe() const;
  // The knobs every rank of a group must share, because they shape the messages
  // (algorithm, transport, segment size, fingerprint) or its CUDA communicator's
  // set-up (RINGCOLL_NCCL_BLOCKING), in describe()'s form; the backend refuses a
  // group whose ranks differ in them.
  std::string shared() const;
  // RINGCOLL_NCCL_BLOCKING's value as written: "0", "1" or "connected".
  const char* ncclBlockingName() const;
  // The small collectives' limit as it applies (0 where RINGCOLL_ALGO is set).
  size_t smallLimit() const { return algoSet ? 0 : smallBytes; }
};

}  // namespace ringcoll
