#include "transport/shm_transport.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "common/errors.h"


namespace ringcoll {

namespace {
constexpr uint64_t kMagic = 0x3130304d48534352ull;  // "RCSHM001"
constexpr size_t kPage = 4096;

size_t roundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

std::string sysError(const char* what) { return RC_STR(what, ": ", std::strerror(errno)); }

// The liveness lock (shm_transport.h): byte 0 of a segment's file, for writing.
flock livenessLock(short type) {
  flock l{};
  l.l_type = type;
  l.l_whence = SEEK_SET;
  l.l_start = 0;
  l.l_len = 1;
  return l;
}

// A token set by tests (0: none), so that they can place stale files exactly where
// a group will create its segments.
std::atomic<uint64_t> g_tokenForTests{0};

uint64_t randomToken() {
  if (const uint64_t forced = g_tokenForTests.load()) return forced;
  uint64_t t = 0;
  RC_REQUIRE(getrandom(&t, sizeof(t), 0) == static_cast<ssize_t>(sizeof(t)),
               sysError("ringcoll shm: getrandom"));
  return t;
}

}  // namespace

void setShmTokenForTests(uint64_t token) { g_tokenForTests.store(token); }

namespace {
std::string mebibytes(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", bytes / (1 << 20));
  return buf;
}

// Why `bytes` of shared memory could not be reserved on the file system of `fd`, and
// what to do: a /dev/shm too small for the group (a container's default) would
// otherwise be found only at the first touch of a page, by SIGBUS.
std::string reserveFailure(int fd, int err, size_t bytes, int localRanks, size_t slotBytes) {
  struct statvfs vfs;
  const std::string freeText = fstatvfs(fd, &vfs) == 0
      ? mebibytes(static_cast<double>(vfs.f_bavail) * static_cast<double>(vfs.f_frsize))
      : std::string("an unknown amount");
  return RC_STR("could not reserve ", mebibytes(static_cast<double>(bytes)),
                " of shared memory in /dev/shm for its segment (", std::strerror(err), "; ",
                freeText, " free there). Each rank's segment holds ", ShmTransport::kSlots,
                " slots of RINGCOLL_CHUNK_BYTES=", slotBytes, " per rank of its host (",
                localRanks, " here), and a group has two (collectives and point-to-point): "
                "give /dev/shm more room (docker run --shm-size), lower RINGCOLL_CHUNK_BYTES, "
                "or use RINGCOLL_TRANSPORT=gloo");
}

// Creates the segment file `name` (O_EXCL, 0600). A file of that name already there
// means a token collision, a 1-in-2^64 event per name: a file nobody holds the
// liveness lock of was left by a job that died during set-up and is replaced; one
// whose lock is held belongs to a live group, and is an error. (A live group between
// its shm_open and its lock would read as stale: a window of microseconds, on top of
// the collision.)
int createSegmentFile(const std::string& name) {
  for (int attempt = 0;; ++attempt) {
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0 || errno != EEXIST || attempt > 0) {
      RC_REQUIRE(fd >= 0, sysError(RC_STR("ringcoll shm: shm_open ", name).c_str()));
      return fd;
    }
    const int old = shm_open(name.c_str(), O_RDWR, 0600);
    flock probe = livenessLock(F_WRLCK);
    const bool probed = old >= 0 && fcntl(old, F_GETLK, &probe) == 0;
    if (old >= 0) close(old);
    RC_REQUIRE(!probed || probe.l_type == F_UNLCK, "ringcoll shm: segment ", name,
               " already exists and is held by pid ", probe.l_pid,
               " (a live group with the same token)");
    shm_unlink(name.c_str());  // stale (or gone meanwhile): create it afresh
  }
}

std::string segmentName(uint64_t token, int rank) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "/ringcoll-%016llx-%d",
                static_cast<unsigned long long>(token), rank);
  return buf;
}
}  // namespace

struct ShmTransport::Header {
  uint64_t magic;
  uint64_t token;
  int32_t rank;
  int32_t localCount;
  int32_t pid;
  uint32_t slots;
  uint64_t slotBytes;
  DoorbellWord bell;  // rung by peers that published to, or freed a slot of, this rank
};

// Messages from one sender. The two counters sit on lines of their own: the
// sender writes `written`, the receiver `released`.
struct ShmTransport::Mailbox {
  alignas(64) std::atomic<uint64_t> written{0};
  alignas(64) std::atomic<uint64_t> released{0};
  alignas(64) uint64_t sizes[kSlots] = {};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared counters");

ShmTransport::ShmTransport(Rendezvous& rv, int rank, int size, const std::vector<int>& local,
                           size_t slotBytes, WaitPolicy policy)
    : rank_(rank), size_(size), slotBytes_(slotBytes) {
  RC_ASSERT(slotBytes_ > 0);
  std::vector<int> sorted = local;
  std::sort(sorted.begin(), sorted.end());
  localCount_ = static_cast<int>(sorted.size());
  myLocal_ = static_cast<int>(std::find(sorted.begin(), sorted.end(), rank) - sorted.begin());
  RC_ASSERT(myLocal_ < localCount_, "rank ", rank, " not among its host's ranks");
  stride_ = roundUp(slotBytes_, kPage);
  dataOffset_ = roundUp(kPage + static_cast<size_t>(localCount_) * sizeof(Mailbox), kPage);
  const size_t total = dataOffset_ + static_cast<size_t>(localCount_) * kSlots * stride_;

  // The host's lowest rank draws the token that names this group's segments.
  const std::string tokenKey = RC_STR("ringcoll/shm/token/", sorted[0]);
  if (rank == sorted[0]) rv.set(tokenKey, std::to_string(randomToken()));
  const uint64_t token = std::stoull(rv.get(tokenKey));
  name_ = segmentName(token, rank);
  links_.resize(static_cast<size_t>(size));

  try {
    int fd = -1;
    try {
      fd = createSegmentFile(name_);
    } catch (const std::exception& e) {
      // The peers wait for this rank's segment: tell them why there is none.
      rv.set(RC_STR("ringcoll/shm/created/", rank), RC_STR("!could not create its segment: ",
                                                           e.what()));
      throw;
    }
    // Every page reserved now (posix_fallocate), not at its first touch: a /dev/shm
    // too small fails here, on every rank (the peers read it from the store), and
    // never as a SIGBUS in the middle of a collective.
    const int reserved = posix_fallocate(fd, 0, static_cast<off_t>(total));
    if (reserved != 0) {
      const std::string why = reserveFailure(fd, reserved, total, localCount_, slotBytes_);
      close(fd);
      shm_unlink(name_.c_str());
      rv.set(RC_STR("ringcoll/shm/created/", rank), "!" + why);
      throw std::runtime_error(RC_STR("ringcoll shm: rank ", rank, " ", why));
    }
    const bool sized = ftruncate(fd, static_cast<off_t>(total)) == 0;
    void* base = sized ? mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                       : MAP_FAILED;
    flock lock = livenessLock(F_WRLCK);
    const bool locked = base != MAP_FAILED && fcntl(fd, F_SETLK, &lock) == 0;
    const int err = errno;
    if (!locked) {
      if (base != MAP_FAILED) munmap(base, total);
      close(fd);
      shm_unlink(name_.c_str());
    }
    errno = err;
    RC_REQUIRE(locked, sysError(RC_STR("ringcoll shm: mapping and locking ", total,
                                       " bytes").c_str()));
    fd_ = fd;  // kept open: closing it would drop the lock
    mine_ = Segment{base, total};
    auto* h = new (base) Header{kMagic, token, rank, localCount_, static_cast<int32_t>(getpid()),
                                kSlots, slotBytes_, {}};
    for (int s = 0; s < localCount_; ++s) {
      new (static_cast<char*>(base) + kPage + s * sizeof(Mailbox)) Mailbox();
    }
    bell_ = std::make_unique<Doorbell>(&h->bell, /*shared=*/true, policy);
    rv.set(RC_STR("ringcoll/shm/created/", rank), "1");

    // Every peer's outcome first: a rank that failed to create its segment makes the
    // others fail too and remove theirs, so opening in order could fail on a segment
    // already gone and hide the reason.
    for (int peer : sorted) {
      if (peer == rank) continue;
      const std::string created = rv.get(RC_STR("ringcoll/shm/created/", peer));
      RC_REQUIRE(created.empty() || created[0] != '!', "ringcoll shm: rank ", peer, " ",
                 created.substr(1));
    }
    for (int li = 0; li < localCount_; ++li) {
      const int peer = sorted[li];
      Link& l = links_[peer];
      l.localIndex = li;
      if (peer == rank) continue;
      const std::string name = segmentName(token, peer);
      const int pfd = shm_open(name.c_str(), O_RDWR, 0600);
      RC_REQUIRE(pfd >= 0, sysError(RC_STR("ringcoll shm: opening rank ", peer,
                                             "'s segment ", name).c_str()));
      struct stat st;
      const bool ok = fstat(pfd, &st) == 0 && static_cast<size_t>(st.st_size) == total;
      void* pbase = ok ? mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0)
                       : MAP_FAILED;
      if (pbase == MAP_FAILED) close(pfd);
      RC_REQUIRE(pbase != MAP_FAILED, "ringcoll shm: cannot map rank ", peer,
                   "'s segment ", name, " (", total, " bytes expected)");
      l.seg = Segment{pbase, total};
      l.fd = pfd;  // for the peer's liveness lock
      const Header* ph = l.seg.header();
      RC_REQUIRE(ph->magic == kMagic && ph->token == token && ph->rank == peer &&
                       ph->localCount == localCount_ && ph->slotBytes == slotBytes_,
                   "ringcoll shm: rank ", peer, "'s segment ", name,
                   " does not match this group (different knobs on different ranks?)");
      l.pid = ph->pid;
    }
    // The spin yields to a local peer that waits for this rank's core (doorbell.h).
    std::vector<const DoorbellWord*> watched;
    for (int peer : sorted) {
      if (peer != rank) watched.push_back(&links_[peer].seg.header()->bell);
    }
    bell_->watch(std::move(watched), myLocal_);
    // Everybody has mapped everything: the names can go.
    rv.set(RC_STR("ringcoll/shm/mapped/", rank), "1");
    for (int peer : sorted) {
      if (peer != rank) rv.get(RC_STR("ringcoll/shm/mapped/", peer));
    }
    shm_unlink(name_.c_str());
    unlinked_ = true;
  } catch (...) {
    if (!unlinked_ && mine_.base != nullptr) shm_unlink(name_.c_str());
    for (auto& l : links_) {
      if (l.seg.base != nullptr && l.seg.base != mine_.base) munmap(l.seg.base, l.seg.bytes);
      if (l.fd >= 0) close(l.fd);
    }
    if (mine_.base != nullptr) munmap(mine_.base, mine_.bytes);
    if (fd_ >= 0) close(fd_);
    throw;
  }
}

ShmTransport::~ShmTransport() {
  if (!unlinked_) shm_unlink(name_.c_str());
  for (auto& l : links_) {
    if (l.seg.base != nullptr) munmap(l.seg.base, l.seg.bytes);
    if (l.fd >= 0) close(l.fd);
  }
  bell_.reset();
  if (mine_.base != nullptr) munmap(mine_.base, mine_.bytes);
  if (fd_ >= 0) close(fd_);  // drops the liveness lock
}

ShmTransport::Mailbox* ShmTransport::mailbox(const Segment& seg, int senderLocal) const {
  return reinterpret_cast<Mailbox*>(static_cast<char*>(seg.base) + kPage +
                                    senderLocal * sizeof(Mailbox));
}

char* ShmTransport::slot(const Segment& seg, int senderLocal, uint64_t seq) const {
  return static_cast<char*>(seg.base) + dataOffset_ +
      (static_cast<size_t>(senderLocal) * kSlots + seq % kSlots) * stride_;
}

ShmTransport::Link& ShmTransport::link(int peer) {
  RC_ASSERT(peer >= 0 && peer < size_ && peer != rank_ && links_[peer].localIndex >= 0,
            "rank ", peer, " is not a shared-memory peer of rank ", rank_);
  return links_[peer];
}

void* ShmTransport::sendSlot(int peer, size_t bytes) {
  Link& l = link(peer);
  RC_ASSERT(bytes <= slotBytes_, "message of ", bytes, " bytes > slot ", slotBytes_);
  const Mailbox* mb = mailbox(l.seg, myLocal_);
  // Sequentially consistent, with the store in commitSlot() and the pair in
  // releaseRecv(): see there.
  l.sendBlocked = l.written - mb->released.load(std::memory_order_seq_cst) >= kSlots;
  if (l.sendBlocked) return nullptr;
  return slot(l.seg, myLocal_, l.written);
}

void ShmTransport::commitSlot(int peer, size_t bytes) {
  Link& l = link(peer);
  Mailbox* mb = mailbox(l.seg, myLocal_);
  mb->sizes[l.written % kSlots] = bytes;
  mb->written.store(++l.written, std::memory_order_seq_cst);
  Doorbell::ring(&l.seg.header()->bell, /*shared=*/true);
  // A rank that sends is in a collective: its peers may need to yield it their core
  // (doorbell.h), the one that never waits (the last to arrive) included.
  bell_->present();
}

bool ShmTransport::trySend(int peer, const void* src, size_t bytes) {
  void* dst = sendSlot(peer, bytes);
  if (dst == nullptr) return false;
  std::memcpy(dst, src, bytes);
  commitSlot(peer, bytes);
  return true;
}

// A message is copied when it is posted, so every posted send is done.
uint64_t ShmTransport::sendsDone(int peer) { return link(peer).written; }

bool ShmTransport::tryPostRecv(int peer, void*, size_t bytes) {
  link(peer).expected.push_back(bytes);
  return true;
}

const void* ShmTransport::recvView(int peer) {
  size_t got = 0;
  const void* view = recvViewAny(peer, &got);
  if (view == nullptr) return nullptr;
  const Link& l = link(peer);
  const size_t want = l.expected[l.expectedHead];
  if (got != want) throw wrongSize(peer, got, want);
  return view;
}

const void* ShmTransport::recvViewAny(int peer, size_t* got) {
  Link& l = link(peer);
  if (l.expectedHead == l.expected.size()) return nullptr;
  const Mailbox* mb = mailbox(mine_, l.localIndex);
  if (mb->written.load(std::memory_order_acquire) <= l.consumed) return nullptr;
  *got = mb->sizes[l.consumed % kSlots];
  return slot(mine_, l.localIndex, l.consumed);
}

void ShmTransport::releaseRecv(int peer) {
  Link& l = link(peer);
  RC_ASSERT(l.expectedHead < l.expected.size(), "release without a receive from ", peer);
  Mailbox* mb = mailbox(mine_, l.localIndex);
  // The sender waits only when its ring was full, so only then is it rung. Store
  // `released`, then load `written`, both sequentially consistent, as the sender
  // stores `written` (commitSlot) before it loads `released` (sendSlot): either the
  // sender sees the freed slot, or this load sees the message that filled the ring
  // and rings. (Loading `written` first let both sides read the other's old value:
  // the sender slept on a full ring nobody rang, found by the mixed-hosts test.)
  mb->released.store(++l.consumed, std::memory_order_seq_cst);
  const uint64_t written = mb->written.load(std::memory_order_seq_cst);
  if (written - (l.consumed - 1) >= kSlots) Doorbell::ring(&l.seg.header()->bell, true);
  if (++l.expectedHead == l.expected.size()) {
    l.expected.clear();
    l.expectedHead = 0;
  }
}

void ShmTransport::checkPeers() {
  for (size_t peer = 0; peer < links_.size(); ++peer) {
    Link& l = links_[peer];
    if (l.fd < 0 || l.exitReported) continue;
    // What this rank waits for from the peer: receives posted beyond the messages
    // already in its mailbox (they outlive the sender), or a free slot to send.
    const uint64_t arrived =
        mailbox(mine_, l.localIndex)->written.load(std::memory_order_acquire) - l.consumed;
    const bool owed = l.expected.size() - l.expectedHead > arrived || l.sendBlocked;
    if (!owed) continue;
    flock probe = livenessLock(F_WRLCK);
    if (fcntl(l.fd, F_GETLK, &probe) == 0 && probe.l_type == F_UNLCK) {
      l.exitReported = true;
      throw PeerError(static_cast<int>(peer),
                      RC_STR("rank ", peer, " (pid ", l.pid, ") exited or left the group"));
    }
  }
}

void ShmTransport::idle(uint32_t token, Clock::time_point until) {
  // Sleep in slices, so a peer that exited is noticed without waiting out the
  // group's timeout.
  for (;;) {
    const auto slice = std::min(until, Clock::now() + std::chrono::milliseconds(50));
    bell_->wait(token, slice);
    if (bell_->token() != token || Clock::now() >= until) return;
    checkPeers();
  }
}

namespace {
constexpr const char* kProbePrefix = "/ringcoll-probe-";
}  // namespace

ShmProbe::ShmProbe() {
  uint64_t token = 0;
  if (getrandom(&token, sizeof(token), 0) != static_cast<ssize_t>(sizeof(token))) return;
  char name[64];
  std::snprintf(name, sizeof(name), "%s%016llx", kProbePrefix,
                static_cast<unsigned long long>(token));
  const int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return;
  const bool written = ::write(fd, &token, sizeof(token)) == static_cast<ssize_t>(sizeof(token));
  ::close(fd);
  if (!written) {
    shm_unlink(name);
    return;
  }
  name_ = name;
}

ShmProbe::~ShmProbe() {
  if (!name_.empty()) shm_unlink(name_.c_str());
}

bool ShmProbe::reachable(const std::string& name) {
  const size_t prefix = std::strlen(kProbePrefix);
  if (name.size() != prefix + 16 || name.compare(0, prefix, kProbePrefix) != 0) return false;
  const uint64_t want = std::strtoull(name.c_str() + prefix, nullptr, 16);
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return false;
  uint64_t got = 0;
  const bool read = ::read(fd, &got, sizeof(got)) == static_cast<ssize_t>(sizeof(got));
  ::close(fd);
  return read && got == want;
}

}  // namespace ringcoll
