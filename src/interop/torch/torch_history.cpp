#include "torch_history.hpp"

#include <algorithm>
#include <memory>
#include <utility>

#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/segment_observer.hpp"

namespace syncmem::interop {
namespace {

using c10::CachingDeviceAllocator::RecordContext;
using trace_entry = torch_history::trace_entry;

constexpr std::size_t action_count = static_cast<std::size_t>(trace_entry::OOM) + 1;

// Tells the history of one resource's segments and of its growable range's
// mappings: the device's, or a MemPool's (marked with its id).
class segment_recorder final : public mr::segment_observer {
 public:
  segment_recorder(torch_history& history, c10::DeviceIndex device, c10::MempoolId_t pool = {0, 0})
      : history_{history}, device_{device}, pool_{pool} {}
  void segment_added(void* base, std::size_t bytes) noexcept override {
    history_.on_segment(device_, trace_entry::SEGMENT_ALLOC, base, bytes, pool_);
  }
  void segment_releasing(void* base, std::size_t bytes) noexcept override {
    history_.on_segment(device_, trace_entry::SEGMENT_FREE, base, bytes, pool_);
  }
  void range_mapped(void* at, std::size_t bytes) noexcept override {
    history_.on_segment(device_, trace_entry::SEGMENT_MAP, at, bytes, pool_);
  }
  void range_unmapping(void* at, std::size_t bytes) noexcept override {
    history_.on_segment(device_, trace_entry::SEGMENT_UNMAP, at, bytes, pool_);
  }
  // A graph pool's growable segments map pages as PyTorch's expandable ones do.
  void graph_pool_added(std::uint64_t pool, void* at, std::size_t bytes, bool mapped) noexcept override {
    history_.on_graph_segment(device_, mapped ? trace_entry::SEGMENT_MAP : trace_entry::SEGMENT_ALLOC, at, bytes, pool);
  }
  void graph_pool_releasing(std::uint64_t pool, void* at, std::size_t bytes, bool mapped) noexcept override {
    history_.on_graph_segment(device_, mapped ? trace_entry::SEGMENT_UNMAP : trace_entry::SEGMENT_FREE, at, bytes,
                              pool);
  }

 private:
  torch_history& history_;
  c10::DeviceIndex device_;
  c10::MempoolId_t pool_;
};

}  // namespace

void torch_history::record(bool enabled, c10::CachingDeviceAllocator::CreateContextFn recorder, std::size_t max_entries,
                           RecordContext when, bool clear, const std::vector<std::string>& skip) {
  std::lock_guard lock{mutex_};
  recorder_ = enabled ? recorder : nullptr;
  when_ = enabled ? when : RecordContext::NEVER;
  max_entries_ = std::max<std::size_t>(max_entries, 1);
  skip_.assign(action_count, false);
  for (const std::string& action : skip) {
    skip_[static_cast<std::size_t>(c10::CachingDeviceAllocator::parseTraceEntryAction(action))] = true;
  }
  if (!enabled || clear) {
    for (auto& t : traces_) t.clear();
  }
  if (!enabled) live_.clear();
  enabled_.store(enabled, std::memory_order_relaxed);
}

namespace {
thread_local torch_history::context segment_cause_now;  // see torch_history::segment_cause
}  // namespace

torch_history::segment_cause::segment_cause(context ctx)
    : previous_{std::exchange(segment_cause_now, std::move(ctx))} {}
torch_history::segment_cause::~segment_cause() { segment_cause_now = std::move(previous_); }

torch_history::context torch_history::gather(RecordContext level) {
  if (!enabled()) return nullptr;
  std::unique_lock lock{mutex_};
  const auto recorder = recorder_;
  const bool wanted = recorder != nullptr && when_ >= level;
  lock.unlock();
  return wanted ? recorder() : nullptr;
}

void torch_history::set_user_metadata(const std::string& metadata) {
  std::lock_guard lock{mutex_};
  user_metadata_ = metadata;
}

std::string torch_history::user_metadata() const {
  std::lock_guard lock{mutex_};
  return user_metadata_;
}

// Every entry is kept while recording is on, whatever the context level; as
// in PyTorch's allocator, an entry carries its stack only from level ALLOC
// (at STATE, stacks are kept for the live blocks alone).
void torch_history::add(c10::DeviceIndex device, trace_entry::Action action, std::size_t addr, std::size_t size,
                        void* stream, context ctx, c10::MempoolId_t pool) {
  if (skip_[static_cast<std::size_t>(action)]) return;
  const auto d = static_cast<std::size_t>(std::max<c10::DeviceIndex>(device, 0));
  if (traces_.size() <= d) traces_.resize(d + 1);
  auto& trace = traces_[d];
  if (trace.size() == max_entries_) trace.pop_front();
  trace.emplace_back(action, device, addr, size, stream, pool, c10::getApproximateTime(),
                     when_ >= RecordContext::ALLOC ? std::move(ctx) : nullptr, std::string{}, user_metadata_);
}

void torch_history::on_alloc(c10::DeviceIndex device, const void* p, std::size_t size, void* stream, context ctx) {
  if (!enabled()) return;
  std::lock_guard lock{mutex_};
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  live_[address] = ctx;
  add(device, trace_entry::ALLOC, address, size, stream, std::move(ctx));
}

void torch_history::on_free(c10::DeviceIndex device, const void* p, std::size_t size, void* stream, context ctx) {
  if (!enabled()) return;
  std::lock_guard lock{mutex_};
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  live_.erase(address);
  // syncmem's caching resource orders a free by its stream itself: the
  // request and its completion are one moment here.
  add(device, trace_entry::FREE_REQUESTED, address, size, stream, ctx);
  add(device, trace_entry::FREE_COMPLETED, address, size, stream, std::move(ctx));
}

void torch_history::on_oom(c10::DeviceIndex device, std::size_t size, std::size_t device_free, void* stream) {
  if (!enabled()) return;
  std::lock_guard lock{mutex_};
  add(device, trace_entry::OOM, device_free, size, stream, nullptr);
}

void torch_history::watch(c10::DeviceIndex device, mr::caching_resource& resource) {
  const auto d = static_cast<std::size_t>(device);
  if (d >= watched_.size() || watched_[d].exchange(true)) return;
  // Not under mutex_: the resource tells the new observer of its segments at once.
  resource.add_segment_observer(std::make_shared<segment_recorder>(*this, device));
}

void torch_history::watch_pool(c10::DeviceIndex device, c10::MempoolId_t pool, mr::caching_resource& resource) {
  resource.add_segment_observer(std::make_shared<segment_recorder>(*this, device, pool));
}

void torch_history::on_segment(c10::DeviceIndex device, trace_entry::Action action, const void* at, std::size_t bytes,
                               c10::MempoolId_t pool) {
  if (!enabled()) return;
  try {
    std::lock_guard lock{mutex_};
    add(device, action, reinterpret_cast<std::uintptr_t>(at), bytes, nullptr, segment_cause_now, pool);
  } catch (...) {  // NOLINT(bugprone-empty-catch): an observer must not throw; the entry is lost, as from a full ring
  }
}

void torch_history::name_graph_pool(std::uint64_t pool, c10::MempoolId_t id) {
  std::lock_guard lock{mutex_};
  graph_pools_[pool] = id;
}

void torch_history::on_graph_segment(c10::DeviceIndex device, trace_entry::Action action, const void* at,
                                     std::size_t bytes, std::uint64_t pool) {
  if (!enabled()) return;
  try {
    std::lock_guard lock{mutex_};
    const auto it = graph_pools_.find(pool);
    add(device, action, reinterpret_cast<std::uintptr_t>(at), bytes, nullptr, segment_cause_now,
        it != graph_pools_.end() ? it->second : c10::MempoolId_t{0, 0});
  } catch (...) {  // NOLINT(bugprone-empty-catch): an observer must not throw; the entry is lost, as from a full ring
  }
}

void torch_history::on_snapshot() {
  if (!enabled()) return;
  std::lock_guard lock{mutex_};
  for (std::size_t d = 0; d < traces_.size(); ++d) {
    add(static_cast<c10::DeviceIndex>(d), trace_entry::SNAPSHOT, 0, 0, nullptr, nullptr);
  }
}

std::vector<std::vector<trace_entry>> torch_history::traces(int device_count) {
  std::lock_guard lock{mutex_};
  std::vector<std::vector<trace_entry>> out(static_cast<std::size_t>(std::max(device_count, 0)));
  auto to_unix = clock_.makeConverter();
  for (std::size_t d = 0; d < traces_.size() && d < out.size(); ++d) {
    out[d].assign(traces_[d].begin(), traces_[d].end());
    for (auto& e : out[d]) e.time_.t_ = to_unix(e.time_.approx_t_);
  }
  return out;
}

torch_history::context torch_history::context_of(std::uintptr_t address) {
  std::lock_guard lock{mutex_};
  const auto it = live_.find(address);
  return it == live_.end() ? nullptr : it->second;
}

}  // namespace syncmem::interop
