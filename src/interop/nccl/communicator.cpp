#include "syncmem/nccl/communicator.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <initializer_list>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backend/per_kind.hpp"
#include "call_checks.hpp"
#include "comm_backend.hpp"
#include "core/ignored_failure.hpp"
#include "core/log.hpp"
#include "segment_registrar.hpp"
#include "syncmem/device.hpp"
#include "syncmem/device_buffer.hpp"
#include "syncmem/error.hpp"
#include "syncmem/event.hpp"
#include "syncmem/memory_kind.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/segment_observer.hpp"
#include "syncmem/tensor.hpp"

namespace syncmem::nccl {

// ==== names ======================================================================

std::string to_string(reduce_op op) {
  switch (op) {
    case reduce_op::sum:
      return "sum";
    case reduce_op::prod:
      return "prod";
    case reduce_op::min:
      return "min";
    case reduce_op::max:
      return "max";
    case reduce_op::avg:
      return "avg";
  }
  return "unknown";
}

bool can_reduce(dtype type, reduce_op op) noexcept {
  if (type == dtype::bool_ || type == dtype::int16) return false;
  return op != reduce_op::avg || is_floating_point(type);
}

namespace detail {

const char* to_string(collective kind) noexcept {
  switch (kind) {
    case collective::all_reduce:
      return "all_reduce";
    case collective::broadcast:
      return "broadcast";
    case collective::all_gather:
      return "all_gather";
    case collective::reduce_scatter:
      return "reduce_scatter";
    case collective::send:
      return "send";
    case collective::recv:
      return "recv";
  }
  return "unknown";
}

std::string describe(const call& c) {
  std::string text = fmt::format("{} of {} {}", to_string(c.kind), c.count, syncmem::to_string(c.type));
  switch (c.kind) {
    case collective::all_reduce:
    case collective::reduce_scatter:
      return text + fmt::format(" ({})", nccl::to_string(c.op));
    case collective::broadcast:
      return text + fmt::format(" from root {}", c.peer);
    case collective::send:
      return text + fmt::format(" to rank {}", c.peer);
    case collective::recv:
      return text + fmt::format(" from rank {}", c.peer);
    case collective::all_gather:
      break;
  }
  return text;
}

std::string communicator_name(int rank, int size, device_id device) {
  return fmt::format("nccl communicator rank {} of {} on {}", rank, size, syncmem::to_string(device));
}

std::string describe_registration(const call& c) {
  return describe(c) + (c.registered ? ", in registered memory" : ", in unregistered memory");
}

const comm_factory& comm_factory_for(device_kind kind) noexcept {
  static_assert(device_kind_count == 2, "a new device kind needs its communicators here");
  static constexpr syncmem::detail::per_kind<comm_factory> table{{{
      {&make_nccl_all, &make_nccl_rank, &make_nccl_id},
      {&make_emulated_all, &make_emulated_rank, &make_emulated_id},
  }}};
  return table[kind];
}

}  // namespace detail

unique_id make_unique_id(device_kind kind) { return detail::comm_factory_for(kind).make_id(); }

// ==== the communicator ============================================================

struct communicator::state {
  std::unique_ptr<detail::comm_backend> backend;
  std::uint64_t clique = 0;  // shared by the ranks made together or joined by one id (see grouped_call)
  int rank = 0;
  int size = 1;
  device_id device = device_id::cuda(0);
  std::vector<std::pair<mr::caching_resource*, std::shared_ptr<detail::segment_registrar>>> registered;
  registration_statistics retired;  // of registrars already removed

  [[nodiscard]] std::string name() const { return detail::communicator_name(rank, size, device); }
};

namespace {

void check_devices(std::span<const device_id> devices) {
  SYNCMEM_EXPECTS(!devices.empty(), "nccl::communicator::create_all: devices is empty: give one device per rank");
  std::set<device_id> seen;
  for (const auto d : devices) {
    check_device(d);
    SYNCMEM_EXPECTS(d.kind() == devices[0].kind(),
                    fmt::format("nccl::communicator::create_all: devices mixes {} and {}: all must be CUDA or all "
                                "emulated",
                                to_string(devices[0]), to_string(d)));
    SYNCMEM_EXPECTS(
        seen.insert(d).second,
        fmt::format("nccl::communicator::create_all: {} appears twice in devices: one rank per device", to_string(d)));
  }
}

// Cliques of ranks made together are numbered; those of ranks joined by an
// id are named by the id (the top bit set, so that the two never meet).
std::uint64_t new_clique() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t clique_of(const unique_id& id) {
  std::uint64_t h = 14695981039346656037ULL;  // FNV-1a
  for (const std::uint8_t b : id.bytes) h = (h ^ b) * 1099511628211ULL;
  return h | (std::uint64_t{1} << 63);
}

}  // namespace

// While a call of this rank is checked: a call refused inside a nccl::group
// is recorded for the group's end, which then sees the rank whose call is
// missing (detail::note_refused).
class communicator::attempt {
 public:
  attempt(const communicator& c, detail::collective kind) noexcept
      : state_{c.state_.get()}, kind_{kind}, exceptions_{std::uncaught_exceptions()} {}
  ~attempt() {
    if (state_ == nullptr || std::uncaught_exceptions() == exceptions_) return;
    detail::grouped_call refused{state_->clique, state_->rank, state_->size, state_->device, {}, true};
    refused.c.kind = kind_;
    detail::note_refused(refused);
  }
  attempt(const attempt&) = delete;
  attempt& operator=(const attempt&) = delete;

 private:
  const state* state_;
  detail::collective kind_;
  int exceptions_;
};

std::vector<communicator> communicator::create_all(std::span<const device_id> devices) {
  check_devices(devices);
  auto backends = detail::comm_factory_for(devices[0].kind()).make_all(devices);
  std::vector<communicator> ranks;
  ranks.reserve(devices.size());
  const std::uint64_t clique = new_clique();
  for (std::size_t r = 0; r < devices.size(); ++r) {
    auto s = std::make_unique<state>();
    s->backend = std::move(backends[r]);
    s->clique = clique;
    s->rank = static_cast<int>(r);
    s->size = static_cast<int>(devices.size());
    s->device = devices[r];
    ranks.push_back(communicator{std::move(s)});
  }
  return ranks;
}

communicator::communicator(const unique_id& id, int nranks, int rank, device_id device) {
  SYNCMEM_EXPECTS(nranks >= 1, fmt::format("nccl::communicator: nranks is {}: it must be at least 1", nranks));
  SYNCMEM_EXPECTS(rank >= 0 && rank < nranks,
                  fmt::format("nccl::communicator: rank is {}: valid range is [0, {})", rank, nranks));
  check_device(device);
  auto s = std::make_unique<state>();
  s->backend = detail::comm_factory_for(device.kind()).make_rank(id, nranks, rank, device);
  s->clique = clique_of(id);
  s->rank = rank;
  s->size = nranks;
  s->device = device;
  state_ = std::move(s);
}

communicator::communicator(std::unique_ptr<state> s) noexcept : state_{std::move(s)} {}

communicator::~communicator() {
  if (!state_) return;
  // Nothing of the communicator's may still run; a failure means the device is gone.
  syncmem::detail::ignore_failure("synchronizing the device before destroying a communicator",
                                  [&] { synchronize_device(state_->device); });
  for (auto& [resource, registrar] : state_->registered) {
    if (!registrar->resource_gone()) resource->remove_segment_observer(registrar.get());
    registrar->release_all();
  }
  state_->registered.clear();
  state_->backend.reset();
}

communicator::communicator(communicator&& other) noexcept = default;
communicator& communicator::operator=(communicator&& other) noexcept {
  if (this != &other) {
    communicator old{std::move(*this)};
    state_ = std::move(other.state_);
  }
  return *this;
}

communicator::state& communicator::checked(const char* call) const {
  SYNCMEM_EXPECTS(state_ != nullptr, fmt::format("nccl::communicator::{} on a moved-from communicator", call));
  return *state_;
}

int communicator::rank() const { return checked("rank").rank; }
int communicator::size() const { return checked("size").size; }
device_id communicator::device() const { return checked("device").device; }
std::string communicator::to_string() const { return state_ ? state_->name() : "nccl communicator (moved from)"; }

using detail::buffer_order;
using detail::call;
using detail::check_overlap;
using detail::check_pointer;
using detail::check_rank;
using detail::check_reduction;
using detail::check_same_dtype;
using detail::check_stacked;
using detail::check_stream;
using detail::check_tensor;
using detail::check_tensor_overlap;
using detail::checked_bytes;
using detail::collective;
using detail::elements;

// ==== raw device memory ===========================================================

// The checks every form shares, then the call. Buffers and tensors know their
// memory already: only raw pointers are looked up (pointer_known false).
void communicator::submit(const detail::call& c, stream_view s, bool pointers_known) {
  auto& st = checked(detail::to_string(c.kind));
  const char* name = detail::to_string(c.kind);
  check_stream(*this, name, s);
  const auto n = static_cast<std::size_t>(st.size);
  const std::size_t bytes = checked_bytes(*this, name, c.count, c.type);
  auto pointer = [&](const char* arg, const void* p, std::size_t size) {
    if (!pointers_known) check_pointer(*this, name, arg, p, size);
  };
  detail::call out = c;
  // What the call reads and writes on this rank.
  std::size_t read_bytes = bytes;
  std::size_t write_bytes = bytes;
  switch (c.kind) {
    case collective::all_reduce:
      check_reduction(*this, name, c.type, c.op);
      pointer("send", c.send, bytes);
      pointer("recv", c.recv, bytes);
      check_overlap(*this, name, c.send, bytes, c.recv, bytes, 0, "send == recv");
      break;
    case collective::broadcast:
      check_rank(*this, name, "root", c.peer, true);
      if (st.rank == c.peer) {
        pointer("send", c.send, bytes);
        check_overlap(*this, name, c.send, bytes, c.recv, bytes, 0, "send == recv");
      } else {
        read_bytes = 0;
        if (c.send == nullptr) out.send = c.recv;  // read on the root only
      }
      pointer("recv", c.recv, bytes);
      break;
    case collective::all_gather: {
      const std::size_t total = checked_bytes(*this, name, c.count, c.type, n);
      pointer("send", c.send, bytes);
      pointer("recv", c.recv, total);
      check_overlap(*this, name, c.recv, total, c.send, bytes, bytes * static_cast<std::size_t>(st.rank),
                    "send == recv + rank() * send_count elements");
      write_bytes = total;
      break;
    }
    case collective::reduce_scatter: {
      check_reduction(*this, name, c.type, c.op);
      const std::size_t total = checked_bytes(*this, name, c.count, c.type, n);
      pointer("send", c.send, total);
      pointer("recv", c.recv, bytes);
      check_overlap(*this, name, c.send, total, c.recv, bytes, bytes * static_cast<std::size_t>(st.rank),
                    "recv == send + rank() * recv_count elements");
      read_bytes = total;
      break;
    }
    case collective::send:
      check_rank(*this, name, "peer", c.peer, false);
      pointer("buffer", c.send, bytes);
      write_bytes = 0;
      break;
    case collective::recv:
      check_rank(*this, name, "peer", c.peer, false);
      pointer("buffer", c.recv, bytes);
      read_bytes = 0;
      break;
  }
  detail::claim_memory({c, read_bytes, write_bytes, st.rank, st.size, st.device});
  detail::note_call({st.clique, st.rank, st.size, st.device, out, false});
  st.backend->enqueue(out, s);
}

void communicator::all_reduce(const void* send, void* recv, std::size_t count, dtype type, reduce_op op,
                              stream_view s) {
  const attempt guard{*this, collective::all_reduce};
  submit({collective::all_reduce, send, recv, count, type, op, 0}, s, false);
}

void communicator::broadcast(const void* send, void* recv, std::size_t count, dtype type, int root, stream_view s) {
  const attempt guard{*this, collective::broadcast};
  submit({collective::broadcast, send, recv, count, type, reduce_op::sum, root}, s, false);
}

void communicator::all_gather(const void* send, void* recv, std::size_t send_count, dtype type, stream_view s) {
  const attempt guard{*this, collective::all_gather};
  submit({collective::all_gather, send, recv, send_count, type, reduce_op::sum, 0}, s, false);
}

void communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, dtype type, reduce_op op,
                                  stream_view s) {
  const attempt guard{*this, collective::reduce_scatter};
  submit({collective::reduce_scatter, send, recv, recv_count, type, op, 0}, s, false);
}

void communicator::send(const void* buffer, std::size_t count, dtype type, int peer, stream_view s) {
  const attempt guard{*this, collective::send};
  submit({collective::send, buffer, nullptr, count, type, reduce_op::sum, peer}, s, false);
}

void communicator::recv(void* buffer, std::size_t count, dtype type, int peer, stream_view s) {
  const attempt guard{*this, collective::recv};
  submit({collective::recv, nullptr, buffer, count, type, reduce_op::sum, peer}, s, false);
}

// ==== device buffers ================================================================

void communicator::all_reduce(const device_buffer& send, device_buffer& recv, dtype type, reduce_op op, stream_view s) {
  const attempt guard{*this, collective::all_reduce};
  const std::size_t n = elements(*this, "all_reduce", "send", send, type);
  const std::size_t m = elements(*this, "all_reduce", "recv", recv, type);
  SYNCMEM_EXPECTS(n == m, fmt::format("{}: all_reduce: recv has {} {} elements, expected {} (send's)", to_string(), m,
                                      syncmem::to_string(type), n));
  check_stream(*this, "all_reduce", s);
  const buffer_order order{{&send, &recv}, s, device()};
  submit({collective::all_reduce, send.data(), recv.data(), n, type, op, 0}, s, true);
  order.done();
}

void communicator::broadcast(device_buffer& buffer, dtype type, int root, stream_view s) {
  const attempt guard{*this, collective::broadcast};
  const std::size_t n = elements(*this, "broadcast", "buffer", buffer, type);
  check_stream(*this, "broadcast", s);
  const buffer_order order{{&buffer}, s, device()};
  submit({collective::broadcast, buffer.data(), buffer.data(), n, type, reduce_op::sum, root}, s, true);
  order.done();
}

void communicator::all_gather(const device_buffer& send, device_buffer& recv, dtype type, stream_view s) {
  const attempt guard{*this, collective::all_gather};
  const std::size_t n = elements(*this, "all_gather", "send", send, type);
  const std::size_t m = elements(*this, "all_gather", "recv", recv, type);
  SYNCMEM_EXPECTS(
      m == n * static_cast<std::size_t>(size()),
      fmt::format("{}: all_gather: recv has {} {} elements, expected {} ({} ranks of send's {})", to_string(), m,
                  syncmem::to_string(type), n * static_cast<std::size_t>(size()), size(), n));
  check_stream(*this, "all_gather", s);
  const buffer_order order{{&send, &recv}, s, device()};
  submit({collective::all_gather, send.data(), recv.data(), n, type, reduce_op::sum, 0}, s, true);
  order.done();
}

void communicator::reduce_scatter(const device_buffer& send, device_buffer& recv, dtype type, reduce_op op,
                                  stream_view s) {
  const attempt guard{*this, collective::reduce_scatter};
  const std::size_t n = elements(*this, "reduce_scatter", "send", send, type);
  const std::size_t m = elements(*this, "reduce_scatter", "recv", recv, type);
  SYNCMEM_EXPECTS(
      n == m * static_cast<std::size_t>(size()),
      fmt::format("{}: reduce_scatter: send has {} {} elements, expected {} ({} ranks of recv's {})", to_string(), n,
                  syncmem::to_string(type), m * static_cast<std::size_t>(size()), size(), m));
  check_stream(*this, "reduce_scatter", s);
  const buffer_order order{{&send, &recv}, s, device()};
  submit({collective::reduce_scatter, send.data(), recv.data(), m, type, op, 0}, s, true);
  order.done();
}

void communicator::send(const device_buffer& buffer, dtype type, int peer, stream_view s) {
  const attempt guard{*this, collective::send};
  const std::size_t n = elements(*this, "send", "buffer", buffer, type);
  check_stream(*this, "send", s);
  const buffer_order order{{&buffer}, s, device()};
  submit({collective::send, buffer.data(), nullptr, n, type, reduce_op::sum, peer}, s, true);
  order.done();
}

void communicator::recv(device_buffer& buffer, dtype type, int peer, stream_view s) {
  const attempt guard{*this, collective::recv};
  const std::size_t n = elements(*this, "recv", "buffer", buffer, type);
  check_stream(*this, "recv", s);
  const buffer_order order{{&buffer}, s, device()};
  submit({collective::recv, nullptr, buffer.data(), n, type, reduce_op::sum, peer}, s, true);
  order.done();
}

// ==== tensors ==========================================================================

void communicator::all_reduce(const tensor& send, tensor& recv, reduce_op op, stream_view s) {
  const attempt guard{*this, collective::all_reduce};
  check_tensor(*this, "all_reduce", "send", send);
  check_tensor(*this, "all_reduce", "recv", recv);
  check_same_dtype(*this, "all_reduce", send, recv);
  SYNCMEM_EXPECTS(send.shape() == recv.shape(),
                  fmt::format("{}: all_reduce: recv has shape {}, expected {} (send's shape)", to_string(),
                              recv.shape().to_string(), send.shape().to_string()));
  check_tensor_overlap(*this, "all_reduce", send, recv, 0, "the same tensor");
  check_stream(*this, "all_reduce", s);
  check_reduction(*this, "all_reduce", send.dtype(), op);
  const void* in = send.device_data(s);
  void* out = recv.mutable_device_data(s);
  submit({collective::all_reduce, in, out, send.numel(), send.dtype(), op, 0}, s, true);
}

void communicator::all_reduce(tensor& t, reduce_op op, stream_view s) {
  const attempt guard{*this, collective::all_reduce};
  check_tensor(*this, "all_reduce", "t", t);
  check_stream(*this, "all_reduce", s);
  check_reduction(*this, "all_reduce", t.dtype(), op);
  void* p = t.mutable_device_data(s);
  submit({collective::all_reduce, p, p, t.numel(), t.dtype(), op, 0}, s, true);
}

void communicator::broadcast(tensor& t, int root, stream_view s) {
  const attempt guard{*this, collective::broadcast};
  check_tensor(*this, "broadcast", "t", t);
  check_stream(*this, "broadcast", s);
  check_rank(*this, "broadcast", "root", root, true);
  void* p = t.mutable_device_data(s);  // the root's contents are brought to the device too
  submit({collective::broadcast, p, p, t.numel(), t.dtype(), reduce_op::sum, root}, s, true);
}

void communicator::all_gather(const tensor& send, tensor& recv, stream_view s) {
  const attempt guard{*this, collective::all_gather};
  check_tensor(*this, "all_gather", "send", send);
  check_tensor(*this, "all_gather", "recv", recv);
  check_same_dtype(*this, "all_gather", send, recv);
  check_stacked(*this, "all_gather", "recv", recv, "send", send);
  check_tensor_overlap(*this, "all_gather", recv, send, send.nbytes() * static_cast<std::size_t>(rank()),
                       "send is slice rank() of recv");
  check_stream(*this, "all_gather", s);
  const void* in = send.device_data(s);
  void* out = recv.mutable_device_data(s);
  submit({collective::all_gather, in, out, send.numel(), send.dtype(), reduce_op::sum, 0}, s, true);
}

void communicator::reduce_scatter(const tensor& send, tensor& recv, reduce_op op, stream_view s) {
  const attempt guard{*this, collective::reduce_scatter};
  check_tensor(*this, "reduce_scatter", "send", send);
  check_tensor(*this, "reduce_scatter", "recv", recv);
  check_same_dtype(*this, "reduce_scatter", send, recv);
  check_stacked(*this, "reduce_scatter", "send", send, "recv", recv);
  check_tensor_overlap(*this, "reduce_scatter", send, recv, recv.nbytes() * static_cast<std::size_t>(rank()),
                       "recv is slice rank() of send");
  check_stream(*this, "reduce_scatter", s);
  check_reduction(*this, "reduce_scatter", send.dtype(), op);
  const void* in = send.device_data(s);
  void* out = recv.mutable_device_data(s);
  submit({collective::reduce_scatter, in, out, recv.numel(), send.dtype(), op, 0}, s, true);
}

void communicator::send(const tensor& t, int peer, stream_view s) {
  const attempt guard{*this, collective::send};
  check_tensor(*this, "send", "t", t);
  check_stream(*this, "send", s);
  check_rank(*this, "send", "peer", peer, false);
  submit({collective::send, t.device_data(s), nullptr, t.numel(), t.dtype(), reduce_op::sum, peer}, s, true);
}

void communicator::recv(tensor& t, int peer, stream_view s) {
  const attempt guard{*this, collective::recv};
  check_tensor(*this, "recv", "t", t);
  check_stream(*this, "recv", s);
  check_rank(*this, "recv", "peer", peer, false);
  // Every byte is overwritten: no upload of a stale host side is needed.
  submit({collective::recv, nullptr, t.mutable_device_data(s), t.numel(), t.dtype(), reduce_op::sum, peer}, s, true);
}

// ==== registration ====================================================================

void communicator::register_segments(mr::caching_resource& resource) {
  auto& st = checked("register_segments");
  SYNCMEM_EXPECTS(resource.device() == st.device,
                  fmt::format("{}: register_segments: {} belongs to another device", st.name(), resource.name()));
  for (const auto& [r, registrar] : st.registered) {
    SYNCMEM_EXPECTS(r != &resource,
                    fmt::format("{}: register_segments: {} is registered already", st.name(), resource.name()));
  }
  auto registrar = std::make_shared<detail::segment_registrar>(*st.backend, st.name());
  st.registered.emplace_back(&resource, registrar);
  try {
    resource.add_segment_observer(registrar);
  } catch (...) {
    st.registered.pop_back();
    registrar->release_all();
    throw;
  }
}

void communicator::unregister_segments(mr::caching_resource& resource) {
  auto& st = checked("unregister_segments");
  const auto it = std::find_if(st.registered.begin(), st.registered.end(),
                               [&resource](const auto& entry) { return entry.first == &resource; });
  SYNCMEM_EXPECTS(it != st.registered.end(),
                  fmt::format("{}: unregister_segments: {} was not registered", st.name(), resource.name()));
  if (!it->second->resource_gone()) resource.remove_segment_observer(it->second.get());
  synchronize_device(st.device);  // collectives still running may use the registration
  it->second->release_all();
  const auto done = it->second->statistics();
  st.retired.registrations += done.registrations;
  st.retired.deregistrations += done.deregistrations;
  st.retired.failures += done.failures;
  st.registered.erase(it);
}

registration_statistics communicator::registrations() const {
  const auto& st = checked("registrations");
  registration_statistics total = st.retired;
  for (const auto& [resource, registrar] : st.registered) {
    const auto r = registrar->statistics();
    total.segments += r.segments;
    total.bytes += r.bytes;
    total.registrations += r.registrations;
    total.deregistrations += r.deregistrations;
    total.failures += r.failures;
  }
  return total;
}

}  // namespace syncmem::nccl
