#include "allocator_methods.hpp"

#include <cstdlib>
#include <new>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "syncmem/device.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/mr/cuda_async_resource.hpp"
#include "syncmem/mr/cuda_resource.hpp"
#include "syncmem/mr/emulated_resource.hpp"
#include "syncmem/mr/limiting_adaptor.hpp"
#include "syncmem/mr/statistics_adaptor.hpp"

#ifdef SYNCMEM_BENCH_HAS_TORCH
#include "torch/torch_bridge.hpp"
#endif
#ifdef SYNCMEM_BENCH_HAS_RMM
#include "rmm/rmm_bridge.hpp"
#endif

namespace syncmem::bench {

namespace {

// A syncmem memory resource; `counted` adds a statistics_adaptor where the
// resource keeps no peaks itself (used by the replays only), `limit` a
// limiting_adaptor where it has no limit of its own (every allocation straight
// from the device, so that what it allocates is what it reserves).
class resource_under_test final : public allocator_under_test {
 public:
  resource_under_test(std::unique_ptr<mr::memory_resource> r, bool counted,
                      std::optional<std::size_t> limit = std::nullopt)
      : resource_{std::move(r)},
        counted_{counted ? std::make_unique<mr::statistics_adaptor>(*resource_) : nullptr},
        limited_{limit ? std::make_unique<mr::limiting_adaptor>(*resource_, *limit) : nullptr},
        use_{limited_   ? static_cast<mr::memory_resource*>(limited_.get())
             : counted_ ? static_cast<mr::memory_resource*>(counted_.get())
                        : resource_.get()} {}
  void* allocate(std::size_t bytes, stream_view s) override { return use_->allocate(bytes, s); }
  void deallocate(void* p, std::size_t bytes, stream_view s) override { use_->deallocate(p, bytes, s); }
  peaks peak() override {
    if (auto* caching = dynamic_cast<mr::caching_resource*>(resource_.get())) {
      const auto st = caching->statistics();
      return {st.peak_reserved_bytes, st.peak_allocated_bytes};
    }
    if (auto* async = dynamic_cast<mr::cuda_async_resource*>(resource_.get())) {
      const auto st = async->statistics();
      return {st.peak_reserved_bytes, st.peak_used_bytes};
    }
    if (counted_) {  // every allocation straight from the device: what is allocated is reserved
      const auto bytes = static_cast<std::size_t>(counted_->statistics().bytes.peak);
      return {bytes, bytes};
    }
    return {};
  }

 private:
  std::unique_ptr<mr::memory_resource> resource_;
  std::unique_ptr<mr::statistics_adaptor> counted_;
  std::unique_ptr<mr::limiting_adaptor> limited_;
  mr::memory_resource* use_;
};

#if defined(SYNCMEM_BENCH_HAS_TORCH) || defined(SYNCMEM_BENCH_HAS_RMM)
// What a bridge's allocator could not serve, as syncmem's allocators say it.
[[noreturn]] void bridge_out_of_memory(std::size_t bytes, device_id device, const char* allocator) {
  oom_info info;
  info.requested = bytes;
  info.device = device;
  info.resource = allocator;
  SYNCMEM_OUT_OF_MEMORY(std::move(info));
}
#endif

#ifdef SYNCMEM_BENCH_HAS_TORCH
// PyTorch's allocator, emptied and with its peaks reset when made, and
// emptied again when done with, so that runs do not see each other's cache.
// A limit is PyTorch's per-process memory fraction of the device
// (torch.cuda.set_per_process_memory_fraction), which caps what it reserves.
class torch_under_test final : public allocator_under_test {
 public:
  torch_under_test(device_id device, bool expandable, std::optional<std::size_t> limit = std::nullopt)
      : device_{device} {
    char error[512] = {};
    if (!torch_bridge::init(error, sizeof error)) SYNCMEM_UNSUPPORTED(fmt::format("PyTorch's allocator: {}", error));
    set_current_device(device);
    torch_bridge::empty_cache();
    if (!torch_bridge::set_expandable(expandable, error, sizeof error)) {
      SYNCMEM_UNSUPPORTED(fmt::format("PyTorch refuses expandable_segments:{}: {}", expandable, error));
    }
    const double total = static_cast<double>(get_memory_info(device).total);
    if (limit &&
        !torch_bridge::set_memory_fraction(device.index(), static_cast<double>(*limit) / total, error, sizeof error)) {
      SYNCMEM_UNSUPPORTED(fmt::format("PyTorch refuses a memory fraction of {}: {}", *limit / total, error));
    }
    limited_ = limit.has_value();
    torch_bridge::reset_peaks(device.index());
  }
  // Expandable segments stay on: PyTorch does not support switching them
  // once it has allocated, and the process that measures them measures
  // nothing else.
  ~torch_under_test() override {
    torch_bridge::empty_cache();
    if (limited_) (void)torch_bridge::set_memory_fraction(device_.index(), 1.0, nullptr, 0);
  }
  void* allocate(std::size_t bytes, stream_view s) override {
    void* p = torch_bridge::allocate(bytes, s.native_handle());
    if (p == nullptr) bridge_out_of_memory(bytes, device_, "PyTorch's CUDA caching allocator");
    return p;
  }
  void deallocate(void* p, std::size_t, stream_view) override { torch_bridge::deallocate(p); }
  peaks peak() override {
    peaks out;
    (void)torch_bridge::peaks(device_.index(), &out.reserved, &out.allocated);
    return out;
  }

 private:
  device_id device_;
  bool limited_ = false;
};
#endif

#ifdef SYNCMEM_BENCH_HAS_RMM
// One of RAPIDS RMM's resources, made fresh for each run; counted (a
// statistics adaptor on top) for the replays only; limited (the pool's
// maximum_pool_size) for the fit only.
class rmm_under_test final : public allocator_under_test {
 public:
  rmm_under_test(const char* kind, device_id device, bool counted, std::size_t limit = 0) : device_{device} {
    char error[512] = {};
    resource_ = rmm_bridge::create(kind, device.index(), counted, limit, error, sizeof error);
    if (resource_ == nullptr) SYNCMEM_UNSUPPORTED(fmt::format("RMM's {} resource: {}", kind, error));
  }
  ~rmm_under_test() override { rmm_bridge::destroy(resource_); }
  void* allocate(std::size_t bytes, stream_view s) override {
    try {
      return rmm_bridge::allocate(resource_, bytes, s.native_handle());
    } catch (const std::bad_alloc&) {  // rmm::out_of_memory, or a CUDA allocation error
      bridge_out_of_memory(bytes, device_, "RMM");
    }
  }
  void deallocate(void* p, std::size_t bytes, stream_view s) override {
    rmm_bridge::deallocate(resource_, p, bytes, s.native_handle());
  }
  peaks peak() override {
    peaks out;
    rmm_bridge::peaks(resource_, &out.reserved, &out.allocated);
    return out;
  }

 private:
  device_id device_;
  void* resource_ = nullptr;
};
#endif

std::unique_ptr<allocator_under_test> caching(device_id d, const std::string& conf, std::optional<std::size_t> limit) {
  auto options = mr::caching_options::parse(conf);
  if (limit) options.limit = limit;
  return std::make_unique<resource_under_test>(std::make_unique<mr::caching_resource>(d, options), false);
}

std::unique_ptr<allocator_under_test> stream_ordered_pool(device_id d, std::optional<std::size_t> limit) {
  return std::make_unique<resource_under_test>(
      std::make_unique<mr::cuda_async_resource>(d, mr::cuda_async_options{.max_pool_size = limit}), false);
}

}  // namespace

std::vector<method> methods_for(device_id device) {
  std::vector<method> methods;
  const auto caching_with = [&methods](std::string name, std::string conf) {
    methods.push_back({std::move(name), [conf](device_id d, bool) { return caching(d, conf, std::nullopt); },
                       [conf](device_id d, std::size_t limit) { return caching(d, conf, limit); }});
  };
  caching_with("caching", "");
  // Ordinary segments that fail when memory runs out, as the default did
  // before compact_under_pressure.
  caching_with("caching_no_compact", "compact:0");
  caching_with("caching_expandable", "expandable:1");
  // The growable range keeping its reserve near its peak in use, and the same
  // with larger pages: fewer driver calls per byte grown or moved.
  caching_with("caching_expandable_from_idle", "expandable:1,grow_from_idle:1");
  for (const int page_mb : {8, 20}) {
    caching_with(fmt::format("caching_expandable_from_idle_{}mb", page_mb),
                 fmt::format("expandable:1,grow_from_idle:1,expandable_page_mb:{}", page_mb));
  }
  // Pages only, without the large pages of large growths (20 MiB by default).
  caching_with("caching_expandable_pages", "expandable:1,expandable_large_page_mb:0");
  caching_with("caching_expandable_from_idle_pages", "expandable:1,grow_from_idle:1,expandable_large_page_mb:0");
  // The device's own source, as is or under a limiting_adaptor (a limit on
  // the bytes asked for: the reference row of the fit).
  const auto source = [&methods](std::string name, auto make_source) {
    methods.push_back({std::move(name),
                       [make_source](device_id d, bool replay) {
                         return std::make_unique<resource_under_test>(make_source(d), replay);
                       },
                       [make_source](device_id d, std::size_t limit) {
                         return std::make_unique<resource_under_test>(make_source(d), false, limit);
                       }});
  };
  if (device.kind() == device_kind::cuda) {
    source("cudaMalloc", [](device_id d) { return std::make_unique<mr::cuda_resource>(d); });
    methods.push_back({"cudaMallocAsync", [](device_id d, bool) { return stream_ordered_pool(d, std::nullopt); },
                       [](device_id d, std::size_t limit) { return stream_ordered_pool(d, limit); }});
#ifdef SYNCMEM_BENCH_HAS_RMM
    for (const char* kind : {"pool", "arena", "binning", "cuda_async"}) {
      method m{fmt::format("rmm_{}", kind),
               [kind](device_id d, bool replay) { return std::make_unique<rmm_under_test>(kind, d, replay); }};
      if (std::string{kind} == "pool") {
        m.make_limited = [kind](device_id d, std::size_t limit) {
          return std::make_unique<rmm_under_test>(kind, d, false, limit);
        };
      }
      methods.push_back(std::move(m));
    }
#endif
#ifdef SYNCMEM_BENCH_HAS_TORCH
    // PyTorch cannot switch to expandable segments once it has allocated, so
    // its expandable mode is measured in a process of its own:
    // SYNCMEM_BENCH_PYTORCH_EXPANDABLE=1 registers it instead of the default mode.
    const char* e = std::getenv("SYNCMEM_BENCH_PYTORCH_EXPANDABLE");
    const bool expandable = e != nullptr && std::string{e} == "1";
    methods.push_back({expandable ? "pytorch_expandable" : "pytorch",
                       [expandable](device_id d, bool) { return std::make_unique<torch_under_test>(d, expandable); },
                       [expandable](device_id d, std::size_t limit) {
                         return std::make_unique<torch_under_test>(d, expandable, limit);
                       }});
#endif
  } else {
    source("emulated", [](device_id d) { return std::make_unique<mr::emulated_resource>(d); });
    methods.push_back({"emulated_async", [](device_id d, bool) { return stream_ordered_pool(d, std::nullopt); },
                       [](device_id d, std::size_t limit) { return stream_ordered_pool(d, limit); }});
  }
  return methods;
}

void replay_trace(allocator_under_test& a, const allocation_trace& trace, stream_view s) {
  std::vector<void*> slots(trace.slots, nullptr);
  std::size_t done = 0;
  try {
    for (; done < trace.ops.size(); ++done) {
      const auto& op = trace.ops[done];
      if (op.allocate) {
        slots[op.slot] = a.allocate(op.size, s);
      } else {
        a.deallocate(slots[op.slot], op.size, s);
      }
    }
  } catch (...) {
    // What is live: the trace up to the step that failed, walked again (so
    // that the replay itself keeps no more books than a slot per pointer).
    std::vector<std::size_t> live(trace.slots, 0);
    for (std::size_t i = 0; i < done; ++i) live[trace.ops[i].slot] = trace.ops[i].allocate ? trace.ops[i].size : 0;
    for (std::uint32_t slot = 0; slot < trace.slots; ++slot) {
      if (live[slot] != 0) a.deallocate(slots[slot], live[slot], s);
    }
    s.synchronize();
    throw;
  }
  s.synchronize();
}

}  // namespace syncmem::bench
