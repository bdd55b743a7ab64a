// The collectives on emulated devices: each rank's call is a host function on
// its stream; the ranks' functions meet in the clique the communicators share,
// the last to arrive checks that the calls match and moves the data for all,
// and each returns once it is done, so that its stream's later work follows.
// Sends copy their data into a message the matching receive takes, so a send
// never waits for its receiver.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "comm_backend.hpp"
#include "host_reduce.hpp"
#include "syncmem/error.hpp"
#include "syncmem/memory_kind.hpp"

namespace syncmem::nccl::detail {
namespace {

// How long a rank waits for the others before reporting the collective as
// unmatched: NCCL would hang; a test should fail instead.
constexpr auto rendezvous_timeout = std::chrono::seconds{120};

struct message {
  std::vector<std::byte> bytes;
  std::size_t count = 0;
  dtype type = dtype::uint8;
  bool registered = false;
};

class clique {
 public:
  explicit clique(int nranks) : nranks_{nranks} {}

  [[nodiscard]] int size() const noexcept { return nranks_; }

  // For ranks joining by id: takes `rank`, then waits for all to join.
  void join(int rank) {
    std::unique_lock lock{mutex_};
    SYNCMEM_EXPECTS(!taken_.contains(rank),
                    fmt::format("nccl communicator: rank {} of this id has joined already", rank));
    taken_.insert(rank);
    changed_.notify_all();
    if (!changed_.wait_for(lock, rendezvous_timeout, [this] { return static_cast<int>(taken_.size()) == nranks_; })) {
      taken_.erase(rank);
      SYNCMEM_FAIL(fmt::format("nccl communicator: rank {} of {} waited {} s for the other ranks to join", rank,
                               nranks_, rendezvous_timeout.count()));
    }
  }

  void collective(int rank, std::uint64_t sequence, const call& c) {
    std::unique_lock lock{mutex_};
    auto& op = pending_[sequence];
    if (op.calls.empty()) op.calls.resize(static_cast<std::size_t>(nranks_));
    op.calls[static_cast<std::size_t>(rank)] = c;
    if (++op.arrived == nranks_) {
      op.error = mismatch(sequence, op.calls);
      if (op.error.empty()) {
        try {
          run(op.calls);
        } catch (const std::exception& e) {
          op.error = e.what();
        }
      }
      op.done = true;
      changed_.notify_all();
    } else if (!changed_.wait_for(lock, rendezvous_timeout, [&op] { return op.done; })) {
      std::string missing;
      for (int r = 0; r < nranks_; ++r) {
        if (!op.calls[static_cast<std::size_t>(r)]) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
      }
      SYNCMEM_FAIL(fmt::format("nccl {} (collective #{} of rank {}): waited {} s for rank(s) {} to make it",
                               describe(c), sequence, rank, rendezvous_timeout.count(), missing));
    }
    const std::string error = op.error;
    if (++op.left == nranks_) pending_.erase(sequence);
    if (!error.empty()) SYNCMEM_FAIL(error);
  }

  void send(int from, const call& c) {
    message m{std::vector<std::byte>(c.count * size_of(c.type)), c.count, c.type, c.registered};
    if (!m.bytes.empty()) std::memcpy(m.bytes.data(), c.send, m.bytes.size());
    std::lock_guard lock{mutex_};
    channels_[{from, c.peer}].push_back(std::move(m));
    changed_.notify_all();
  }

  void recv(int to, const call& c) {
    std::unique_lock lock{mutex_};
    auto& channel = channels_[{c.peer, to}];
    if (!changed_.wait_for(lock, rendezvous_timeout, [&channel] { return !channel.empty(); })) {
      SYNCMEM_FAIL(fmt::format("nccl {} (rank {}): waited {} s for rank {} to send", describe(c), to,
                               rendezvous_timeout.count(), c.peer));
    }
    message m = std::move(channel.front());
    channel.pop_front();
    lock.unlock();
    SYNCMEM_EXPECTS(m.count == c.count && m.type == c.type,
                    fmt::format("nccl recv on rank {}: rank {} sent {} {}, the receive asks for {} {}", to, c.peer,
                                m.count, syncmem::to_string(m.type), c.count, syncmem::to_string(c.type)));
    SYNCMEM_EXPECTS(m.registered == c.registered,
                    fmt::format("nccl recv on rank {}: rank {} sent from {} memory, the receive is into {} memory; "
                                "NCCL needs both registered (ncclCommRegister) or neither",
                                to, c.peer, m.registered ? "registered" : "unregistered",
                                c.registered ? "registered" : "unregistered"));
    if (!m.bytes.empty()) std::memcpy(c.recv, m.bytes.data(), m.bytes.size());
  }

 private:
  struct pending {
    std::vector<std::optional<call>> calls;
    int arrived = 0;
    int left = 0;
    bool done = false;
    std::string error;
  };

  std::string mismatch(std::uint64_t sequence, const std::vector<std::optional<call>>& calls) const {
    const call& first = *calls[0];
    bool same = true;
    for (const auto& c : calls) {
      same = same && c->kind == first.kind && c->count == first.count && c->type == first.type;
      if (first.kind == collective::all_reduce || first.kind == collective::reduce_scatter) {
        same = same && c->op == first.op;
      }
      if (first.kind == collective::broadcast) same = same && c->peer == first.peer;
    }
    if (same) {
      // NCCL: when one rank passes registered buffers, every rank must.
      bool registered_alike = true;
      for (const auto& c : calls) registered_alike = registered_alike && c->registered == first.registered;
      if (registered_alike) return {};
      std::string text = fmt::format(
          "nccl collective #{}: some ranks' buffers are registered (ncclCommRegister) and some not; NCCL needs all or "
          "none:",
          sequence);
      for (std::size_t r = 0; r < calls.size(); ++r) {
        text += fmt::format(" rank {}: {};", r, describe_registration(*calls[r]));
      }
      text.pop_back();
      return text;
    }
    std::string text = fmt::format("nccl collective #{} does not match across ranks:", sequence);
    for (std::size_t r = 0; r < calls.size(); ++r) text += fmt::format(" rank {}: {};", r, describe(*calls[r]));
    text.pop_back();
    return text;
  }

  void run(const std::vector<std::optional<call>>& calls) const {
    const call& first = *calls[0];
    const std::size_t item = size_of(first.type);
    const std::size_t bytes = first.count * item;
    const auto n = static_cast<std::size_t>(nranks_);
    // Results go to a temporary first: a rank's destination may be its source.
    std::vector<std::byte> result;
    switch (first.kind) {
      case collective::all_reduce: {
        result.resize(bytes);
        if (bytes == 0) return;
        std::memcpy(result.data(), calls[0]->send, bytes);
        for (std::size_t r = 1; r < n; ++r)
          host_reduce(first.type, first.op, result.data(), calls[r]->send, first.count);
        if (first.op == reduce_op::avg) host_divide(first.type, result.data(), first.count, nranks_);
        for (const auto& c : calls) std::memcpy(c->recv, result.data(), bytes);
        return;
      }
      case collective::broadcast: {
        if (bytes == 0) return;
        result.resize(bytes);
        std::memcpy(result.data(), calls[static_cast<std::size_t>(first.peer)]->send, bytes);
        for (const auto& c : calls) std::memcpy(c->recv, result.data(), bytes);
        return;
      }
      case collective::all_gather: {
        if (bytes == 0) return;
        result.resize(bytes * n);
        for (std::size_t r = 0; r < n; ++r) std::memcpy(result.data() + r * bytes, calls[r]->send, bytes);
        for (const auto& c : calls) std::memcpy(c->recv, result.data(), bytes * n);
        return;
      }
      case collective::reduce_scatter: {
        if (bytes == 0) return;
        result.resize(bytes * n);
        std::memcpy(result.data(), calls[0]->send, bytes * n);
        for (std::size_t r = 1; r < n; ++r) {
          host_reduce(first.type, first.op, result.data(), calls[r]->send, first.count * n);
        }
        if (first.op == reduce_op::avg) host_divide(first.type, result.data(), first.count * n, nranks_);
        for (std::size_t r = 0; r < n; ++r) std::memcpy(calls[r]->recv, result.data() + r * bytes, bytes);
        return;
      }
      case collective::send:
      case collective::recv:
        break;
    }
  }

  const int nranks_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::set<int> taken_;
  std::map<std::uint64_t, pending> pending_;
  std::map<std::pair<int, int>, std::deque<message>> channels_;
};

// Cliques of ranks that join by id, while a rank of them lives.
struct id_registry {
  std::mutex mutex;
  std::map<std::array<std::uint8_t, 128>, std::weak_ptr<clique>> cliques;
  std::atomic<std::uint64_t> next{1};
};
id_registry& registry() {
  static auto* const r = new id_registry{};  // never destroyed: ranks may outlive main()
  return *r;
}

class emulated_comm final : public comm_backend {
 public:
  emulated_comm(std::shared_ptr<clique> c, int rank, device_id device)
      : clique_{std::move(c)}, rank_{rank}, device_{device} {}

  void enqueue(const call& in, stream_view s) override {
    auto shared = clique_;
    const int rank = rank_;
    call c = in;
    c.registered = is_registered(c.send) || is_registered(c.recv);
    // As NCCL does, a call in a group reaches its stream when the group ends.
    if (c.kind == collective::send) {
      launch_grouped([s, shared, rank, c] { s.launch_host_func([shared, rank, c] { shared->send(rank, c); }); });
    } else if (c.kind == collective::recv) {
      launch_grouped([s, shared, rank, c] { s.launch_host_func([shared, rank, c] { shared->recv(rank, c); }); });
    } else {
      // Numbered when it reaches the stream: a group that issues none of its
      // calls leaves no gap in the numbers.
      launch_grouped([s, shared, rank, next = sequence_, c] {
        const std::uint64_t sequence = (*next)++;
        s.launch_host_func([shared, rank, sequence, c] { shared->collective(rank, sequence, c); });
      });
    }
  }

  void* register_buffer(void* base, std::size_t bytes, std::string& why) noexcept override {
    try {
      const auto a = get_pointer_attributes(base);
      if (a.kind != memory_kind::device || a.device != device_) {
        why = fmt::format("{} is not device memory of {}", base, syncmem::to_string(device_));
        return nullptr;
      }
      const auto end = static_cast<const std::byte*>(a.base) + a.size;
      if (static_cast<const std::byte*>(base) + bytes > end) {
        why = fmt::format("[{}, +{}) runs past the end of its allocation", base, bytes);
        return nullptr;
      }
      auto record = std::make_unique<registered>(registered{base, bytes});
      std::lock_guard lock{mutex_};
      ranges_.emplace(reinterpret_cast<std::uintptr_t>(base), bytes);
      return record.release();
    } catch (const std::exception& e) {
      why = e.what();
      return nullptr;
    }
  }

  void deregister_buffer(void* handle) noexcept override {
    const std::unique_ptr<registered> record{static_cast<registered*>(handle)};
    std::lock_guard lock{mutex_};
    ranges_.erase(reinterpret_cast<std::uintptr_t>(record->base));
  }

 private:
  struct registered {
    void* base;
    std::size_t bytes;
  };

  // Whether `p` lies in a registered range.
  bool is_registered(const void* p) const {
    if (p == nullptr) return false;
    const auto at = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard lock{mutex_};
    auto it = ranges_.upper_bound(at);
    if (it == ranges_.begin()) return false;
    --it;
    return at < it->first + it->second;
  }

  std::shared_ptr<clique> clique_;
  int rank_;
  device_id device_;
  std::shared_ptr<std::uint64_t> sequence_ = std::make_shared<std::uint64_t>(0);  // one thread at a time per rank
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> ranges_;  // registered: base to size
};

}  // namespace

std::vector<std::unique_ptr<comm_backend>> make_emulated_all(std::span<const device_id> devices) {
  auto shared = std::make_shared<clique>(static_cast<int>(devices.size()));
  std::vector<std::unique_ptr<comm_backend>> ranks;
  for (std::size_t r = 0; r < devices.size(); ++r) {
    ranks.push_back(std::make_unique<emulated_comm>(shared, static_cast<int>(r), devices[r]));
  }
  return ranks;
}

std::unique_ptr<comm_backend> make_emulated_rank(const unique_id& id, int nranks, int rank, device_id device) {
  auto& r = registry();
  std::shared_ptr<clique> shared;
  {
    std::lock_guard lock{r.mutex};
    auto& slot = r.cliques[id.bytes];
    shared = slot.lock();
    if (!shared) {
      shared = std::make_shared<clique>(nranks);
      slot = shared;
    }
  }
  SYNCMEM_EXPECTS(shared->size() == nranks,
                  fmt::format("nccl communicator: nranks is {}, but rank(s) of this id were made with nranks {}",
                              nranks, shared->size()));
  shared->join(rank);
  return std::make_unique<emulated_comm>(shared, rank, device);
}

unique_id make_emulated_id() {
  unique_id id;
  const std::uint64_t n = registry().next.fetch_add(1);
  const char tag[] = "syncmem-emulated";
  std::memcpy(id.bytes.data(), tag, sizeof tag);
  std::memcpy(id.bytes.data() + 32, &n, sizeof n);
  return id;
}

}  // namespace syncmem::nccl::detail
