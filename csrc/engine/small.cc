#include "engine/small.h"

#include <cstring>

#include "common/errors.h"

namespace ringcoll::algo {

const std::string SmallAllreduce::kName = "small-allreduce";

bool SmallAllreduce::fits(Transport& transport, size_t bytes, size_t maxMessage) {
  if (transport.streamOrdered() || bytes + sizeof(Fingerprint) > maxMessage) return false;
  for (int q = 0; q < transport.size(); ++q) {
    if (q != transport.rank() && !transport.copiesSends(q)) return false;
  }
  return true;
}

SmallAllreduce::SmallAllreduce(Transport& transport, Reducer& reducer, const SmallJob& job,
                               void* scratch, const char** views)
    : transport_(transport),
      reducer_(reducer),
      job_(job),
      scratch_(scratch),
      bytes_(job.n * elementSize(job.dtype)),
      header_(job.checked ? sizeof(Fingerprint) : 0),
      message_(header_ + bytes_),
      views_(views),
      lastMove_(Clock::now()) {
  // Unchecked and empty: no message at all (every rank has the same count).
  if (transport_.size() == 1 || message_ == 0) {
    fold();
    done_ = true;
  }
}

bool SmallAllreduce::send() {
  const int p = transport_.size(), r = transport_.rank();
  bool moved = false;
  while (sent_ < p - 1) {
    const int q = (r + 1 + sent_) % p;
    auto* slot = static_cast<char*>(transport_.sendSlot(q, message_));
    if (slot == nullptr) {
      waitPeer_ = q;
      waitWhat_ = "room for a message at";
      return moved;
    }
    if (header_) std::memcpy(slot, &job_.fingerprint, header_);
    std::memcpy(slot + header_, job_.buf, bytes_);
    transport_.commitSlot(q, message_);
    ++sent_;
    moved = true;
  }
  return moved;
}

bool SmallAllreduce::receive() {
  const int p = transport_.size(), r = transport_.rank();
  bool moved = false;
  if (!posted_) {
    // Copying transports always take the announcement (no destination).
    for (int q = 0; q < p; ++q) {
      if (q != r) RC_ASSERT(transport_.tryPostRecv(q, nullptr, message_), "receive from ", q);
    }
    posted_ = true;
  }
  for (int q = 0; q < p; ++q) {
    if (q == r || views_[q] != nullptr) continue;
    size_t got = message_;
    const auto* view = static_cast<const char*>(transport_.recvViewAny(q, &got));
    if (view == nullptr) {
      if (waitPeer_ < 0) {
        waitPeer_ = q;
        waitWhat_ = "a message from";
      }
      continue;
    }
    // The header first, whatever the size: it names the peer's call.
    if (header_) {
      const std::string disagreement =
          got >= header_ ? mismatch(job_.fingerprint, view, q) : std::string();
      if (!disagreement.empty()) {
        transport_.releaseRecv(q);
        throw MismatchError(q, disagreement);
      }
    }
    if (got != message_) {
      transport_.releaseRecv(q);
      throw wrongSize(q, got, message_);
    }
    views_[q] = view + header_;
    ++arrived_;
    moved = true;
  }
  return moved;
}

bool SmallAllreduce::progress() {
  if (done_) return false;
  waitPeer_ = -1;
  bool moved = send();
  moved = receive() || moved;
  if (arrived_ == transport_.size() - 1 && sent_ == transport_.size() - 1) {
    fold();
    for (int q = 0; q < transport_.size(); ++q) {
      if (q != transport_.rank()) transport_.releaseRecv(q);
    }
    done_ = true;
    return true;  // no clock read: nobody asks a finished run when it last moved
  }
  if (moved) lastMove_ = Clock::now();
  return moved;
}

// In rank order on every rank (see small.h): rank 0 folds into its buffer, which
// holds x0 already; any other rank needs its own input after x0 .. x(r-1), so it
// folds into the scratch and copies the result back.
void SmallAllreduce::fold() {
  const int p = transport_.size(), r = transport_.rank();
  auto x = [&](int q) -> const void* { return q == r ? job_.buf : views_[q]; };
  if (p > 1 && bytes_ > 0) {
    void* acc = r == 0 ? job_.buf : scratch_;
    for (int q = 1; q < p; ++q) {
      reducer_.reduce(acc, q == 1 ? x(0) : acc, x(q), job_.n, job_.dtype, job_.op);
    }
    if (r != 0) reducer_.copy(job_.buf, scratch_, bytes_, /*streaming=*/false);
  }
  if (job_.divideBy > 1 && job_.n > 0) {
    reducer_.divide(job_.buf, job_.n, job_.dtype, job_.divideBy);
  }
}

std::string SmallAllreduce::waitingWhat() const {
  if (waitPeer_ < 0) return "its peers";
  return RC_STR(waitWhat_, " rank ", waitPeer_, " (the one message of ", kName, ")");
}

}  // namespace ringcoll::algo
