#include "engine/small.h"

#include <cstring>

#include "common/errors.h"

namespace ringcoll::algo {

const std::string& SmallCollective::name(SmallKind kind) {
  static const std::string names[] = {"small-allreduce", "small-rscatter", "small-allgather",
                                      "small-broadcast"};
  return names[static_cast<int>(kind)];
}

bool SmallCollective::runsOn(const Transport& transport) {
  if (transport.streamOrdered()) return false;
  for (int q = 0; q < transport.size(); ++q) {
    if (q != transport.rank() && !transport.copiesSends(q)) return false;
  }
  return true;
}

SmallCollective::SmallCollective(Transport& transport, Reducer& reducer, const SmallJob& job,
                                 void* scratch, const char** views)
    : transport_(transport),
      reducer_(reducer),
      job_(job),
      scratch_(scratch),
      bytes_(job.n * elementSize(job.dtype)),
      header_(job.checked ? sizeof(Fingerprint) : 0),
      rank_(transport.rank()),
      size_(transport.size()),
      views_(views) {
  for (int q = 0; q < size_; ++q) {
    if (q != rank_ && talks(q, /*send=*/false)) ++expected_;
  }
}

size_t SmallCollective::sendBytes(int) const {
  return job_.kind != SmallKind::kBroadcast || rank_ == job_.root ? bytes_ : 0;
}

size_t SmallCollective::recvBytes(int q) const {
  return job_.kind != SmallKind::kBroadcast || q == job_.root ? bytes_ : 0;
}

const char* SmallCollective::sendFrom(int q) const {
  const auto* buf = static_cast<const char*>(job_.buf);
  switch (job_.kind) {
    case SmallKind::kReduceScatter: return buf + static_cast<size_t>(q) * bytes_;
    case SmallKind::kAllgather: return static_cast<const char*>(job_.in);
    default: return buf;
  }
}

bool SmallCollective::send() {
  bool moved = false;
  while (sendNext_ < size_) {
    const int q = (rank_ + sendNext_) % size_;
    if (!talks(q, /*send=*/true)) {
      ++sendNext_;
      continue;
    }
    const size_t payload = sendBytes(q);
    auto* slot = static_cast<char*>(transport_.sendSlot(q, header_ + payload));
    if (slot == nullptr) {
      waitPeer_ = q;
      waitWhat_ = "room for a message at";
      return moved;
    }
    if (header_) std::memcpy(slot, &job_.fingerprint, header_);
    if (payload) std::memcpy(slot + header_, sendFrom(q), payload);
    transport_.commitSlot(q, header_ + payload);
    ++sendNext_;
    moved = true;
  }
  return moved;
}

bool SmallCollective::receive() {
  bool moved = false;
  if (!posted_) {
    // Copying transports always take the announcement (no destination).
    for (int q = 0; q < size_; ++q) {
      if (q == rank_ || !talks(q, /*send=*/false)) continue;
      RC_ASSERT(transport_.tryPostRecv(q, nullptr, header_ + recvBytes(q)), "receive from ", q);
    }
    posted_ = true;
  }
  for (int q = 0; q < size_; ++q) {
    if (q == rank_ || views_[q] != nullptr || !talks(q, /*send=*/false)) continue;
    const size_t want = header_ + recvBytes(q);
    size_t got = want;
    const auto* view = static_cast<const char*>(transport_.recvViewAny(q, &got));
    if (view == nullptr) {
      if (waitPeer_ < 0) {
        waitPeer_ = q;
        waitWhat_ = "a message from";
      }
      continue;
    }
    const std::exception_ptr error =
        openingError(header_ ? &job_.fingerprint : nullptr, view, got, want, q);
    if (error) {
      transport_.releaseRecv(q);
      std::rethrow_exception(error);
    }
    views_[q] = view + header_;
    ++arrived_;
    moved = true;
  }
  return moved;
}

bool SmallCollective::progress() {
  if (done_) return false;
  waitPeer_ = -1;
  bool moved = send();
  moved = receive() || moved;
  // Every send first: a send reads the buffer that combine() writes.
  if (sendNext_ == size_ && arrived_ == expected_) {
    combine();
    for (int q = 0; q < size_; ++q) {
      if (q != rank_ && talks(q, /*send=*/false)) transport_.releaseRecv(q);
    }
    done_ = true;
    return true;  // no clock read: nobody asks a finished run when it last moved
  }
  // The first pass that does not finish starts the clock (the timeout counts
  // from the last move, or from then).
  if (moved || lastMove_ == Clock::time_point{}) lastMove_ = Clock::now();
  return moved;
}

void SmallCollective::combine() {
  auto* buf = static_cast<char*>(job_.buf);
  switch (job_.kind) {
    case SmallKind::kAllreduce:
      fold(buf, buf);
      break;
    case SmallKind::kReduceScatter:
      fold(buf + static_cast<size_t>(rank_) * bytes_, job_.out);
      break;
    case SmallKind::kAllgather:
      if (bytes_ == 0) break;
      for (int q = 0; q < size_; ++q) {
        char* block = buf + static_cast<size_t>(q) * bytes_;
        const void* from = q == rank_ ? job_.in : views_[q];
        if (from != block) reducer_.copy(block, from, bytes_, /*streaming=*/false);
      }
      break;
    case SmallKind::kBroadcast:
      if (rank_ != job_.root && bytes_ > 0) {
        reducer_.copy(buf, views_[job_.root], bytes_, /*streaming=*/false);
      }
      break;
  }
}

// In rank order on every rank (small.h). Rank 0 folds straight into dst (x0 is
// `mine`, read before dst is written at each element). A rank r >= 1 needs its own
// input after x0 .. x(r-1): where dst is its input it folds into the scratch and
// copies the result back.
void SmallCollective::fold(const void* mine, void* dst) {
  auto x = [&](int q) -> const void* { return q == rank_ ? mine : views_[q]; };
  if (bytes_ > 0) {
    if (size_ == 1) {
      if (dst != mine) reducer_.copy(dst, mine, bytes_, /*streaming=*/false);
    } else {
      void* acc = rank_ != 0 && dst == mine ? scratch_ : dst;
      for (int q = 1; q < size_; ++q) {
        reducer_.reduce(acc, q == 1 ? x(0) : acc, x(q), job_.n, job_.dtype, job_.op);
      }
      if (acc != dst) reducer_.copy(dst, acc, bytes_, /*streaming=*/false);
    }
  }
  if (job_.divideBy > 1 && job_.n > 0) reducer_.divide(dst, job_.n, job_.dtype, job_.divideBy);
}

std::string SmallCollective::waitingWhat() const {
  if (waitPeer_ < 0) return "its peers";
  return RC_STR(waitWhat_, " rank ", waitPeer_, " (the one message of ", name(), ")");
}

}  // namespace ringcoll::algo
