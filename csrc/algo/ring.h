#pragma once

#include "algo/schedule.h"

namespace ringcoll::algo {

// The two phases of the ring (see ring.cc for the worked example). `shift` selects
// which block each rank owns: after RingReduceScatter{shift}, rank r holds the fully
// reduced block (r + shift) mod p; RingAllGather{shift} starts from that ownership
// and ends with every rank holding every block.
//
//   all-reduce      = RingReduceScatter{1} then RingAllGather{1}  (DESIGN.md's ring)
//   reduce-scatter  = RingReduceScatter{0}   (torch: rank r keeps chunk r)
//   all-gather      = RingAllGather{0}       (rank r starts with chunk r)
class RingReduceScatter final : public Phase {
 public:
  explicit RingReduceScatter(int shift) : shift_(shift) {}
  std::string name() const override;
  int numBlocks(int p, int) const override { return p; }
  int numSteps(int p, int) const override { return p - 1; }
  Step step(int rank, int p, int blocks, int s) const override;
  int ownedBlockAfter(int rank, int p) const override;

 private:
  int shift_;
};

class RingAllGather final : public Phase {
 public:
  explicit RingAllGather(int shift) : shift_(shift) {}
  std::string name() const override;
  int numBlocks(int p, int) const override { return p; }
  int numSteps(int p, int) const override { return p - 1; }
  Step step(int rank, int p, int blocks, int s) const override;

 private:
  int shift_;
};

// Broadcast pipelined along the ring: the root's buffer is cut into B blocks that
// flow root -> root+1 -> ... -> root-1, every rank forwarding block j while it
// receives block j+1.
class ChainBroadcast final : public Phase {
 public:
  explicit ChainBroadcast(int root) : root_(root) {}
  std::string name() const override;
  int numBlocks(int, int pipelineBlocks) const override;
  int numSteps(int p, int blocks) const override;
  Step step(int rank, int p, int blocks, int s) const override;

 private:
  int root_;
};

}  // namespace ringcoll::algo
