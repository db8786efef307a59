// Schedules: pure functions that say, for every rank and step, which block to send
// to whom, which to receive from whom, and whether to reduce or copy it.
//
// Vocabulary (fixed here, used everywhere):
//   buffer  - the n elements a collective works on in place, on every rank;
//   block   - one of the k near-equal parts the buffer is split into (for the ring
//             k = p and a block is also called a chunk; for the broadcast chain a
//             block is one pipeline stage). Sizes differ by at most one element
//             and may be zero when n < k;
//   segment - the executor's slice of a block, at most RINGCOLL_CHUNK_BYTES, so
//             staging memory stays bounded. Schedules never see segments.
//   step    - one round in which every rank does at most one send and one receive.
//
// A schedule knows no tensors, devices, streams or sockets. New algorithms are a new
// file implementing Phase plus a line in registry.cc.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ringcoll::algo {

// Half-open element range.
struct Range {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
};

// Block i of n elements split into k blocks: the first n % k blocks get one extra
// element. Precondition: 0 <= i < k.
Range blockRange(size_t n, int k, int i);

enum class Action { kReduce, kCopy };

struct Transfer {
  int peer = -1;   // -1: no transfer in this direction at this step
  int block = -1;
  bool active() const { return peer >= 0; }
};

struct Step {
  Transfer send;
  Transfer recv;
  Action action = Action::kCopy;  // what to do with the received block
};

// One phase of an algorithm: a sequence of steps all ranks walk in lock-step.
class Phase {
 public:
  virtual ~Phase() = default;
  virtual std::string name() const = 0;
  // Number of blocks the buffer is split into. `pipelineBlocks` is the executor's
  // suggestion for phases whose block count is free (the broadcast chain); ring
  // phases ignore it and use p.
  virtual int numBlocks(int p, int pipelineBlocks) const = 0;
  virtual int numSteps(int p, int blocks) const = 0;
  virtual Step step(int rank, int p, int blocks, int s) const = 0;
  // The block this rank holds complete after the phase, or -1 if none/all. Used to
  // apply AVG's division once to the reduced block instead of to the whole buffer.
  virtual int ownedBlockAfter(int rank, int p) const { return -1; }
};

}  // namespace ringcoll::algo
