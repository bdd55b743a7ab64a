// The CUDA backend of a build without CUDA: no devices, every core operation
// refused with syncmem::unsupported_error, and no capabilities (no pools,
// virtual memory or graphs).

#include "backend/backend.hpp"
#include "syncmem/error.hpp"

namespace syncmem::detail {

const char* cuda_error_name(int) noexcept { return "cudaError (no CUDA in this build)"; }
const char* cuda_error_message(int) noexcept { return "this build of syncmem has no CUDA backend"; }
void cuda_clear_last_error() noexcept {}
bool cuda_is_shutting_down(int) noexcept { return false; }
bool cuda_compiled() noexcept { return false; }
int cuda_runtime_version() noexcept { return 0; }
int cuda_driver_version() noexcept { return 0; }

namespace {

[[noreturn]] void refuse() {
  SYNCMEM_UNSUPPORTED(
      "CUDA devices are not available: this build of syncmem has no CUDA backend "
      "(configured with SYNCMEM_ENABLE_CUDA=OFF or without a CUDA toolkit)");
}

class backend_impl final : public backend {
 public:
  device_kind kind() const noexcept override { return device_kind::cuda; }
  // As the CUDA backend's, though with no devices none of them is asked.
  const backend_traits& traits() const noexcept override {
    static constexpr backend_traits t{.keeps_current_device = true,
                                      .pins_for_all_backends = true,
                                      .events_reusable_before_completion = true,
                                      .copies_managed_memory = true,
                                      .pageable_copies_may_read_early = true,
                                      .deallocate_waits_for_device = true};
    return t;
  }
  int device_count() noexcept override { return 0; }
  std::string why_no_devices() override { return "this build of syncmem has no CUDA backend"; }
  device_properties properties(int) override { refuse(); }
  memory_info memory(int) override { refuse(); }
  void synchronize_device(int) override { refuse(); }
  void make_current(int) override { refuse(); }
  int current_index() override { refuse(); }
  void* allocate(int, std::size_t) override { refuse(); }
  void deallocate(int, void*, std::size_t) noexcept override {}
  void* allocate_pinned(std::size_t, unsigned) override { refuse(); }
  void deallocate_pinned(void*, std::size_t) noexcept override {}
  void register_host(void*, std::size_t, unsigned) override { refuse(); }
  void unregister_host(void*) noexcept override {}
  stream_handle create_stream(int, bool, int) override { refuse(); }
  void destroy_stream(int, stream_handle) noexcept override {}
  stream_handle default_stream(int) override { refuse(); }
  void synchronize_stream(int, stream_handle) override { refuse(); }
  bool stream_ready(int, stream_handle) override { refuse(); }
  void launch_host_func(int, stream_handle, host_func, void*) override { refuse(); }
  void memcpy_async(void*, const void*, std::size_t, int, stream_handle) override { refuse(); }
  void memset_async(void*, int, std::size_t, int, stream_handle) override { refuse(); }
  event_handle create_event(int, bool, bool) override { refuse(); }
  void destroy_event(int, event_handle) noexcept override {}
  void record_event(int, event_handle, stream_handle) override { refuse(); }
  bool event_ready(int, event_handle) override { refuse(); }
  void synchronize_event(int, event_handle) override { refuse(); }
  void stream_wait_event(int, stream_handle, event_handle) override { refuse(); }
  float elapsed_ms(int, event_handle, event_handle) override { refuse(); }
  std::optional<pointer_attributes> pointer_info(const void*) override { return std::nullopt; }
  bool can_access_peer(int, int) override { refuse(); }
  void enable_peer_access(int, int) override { refuse(); }
};

}  // namespace

backend& cuda_backend() noexcept {
  static auto* const impl = new backend_impl{};  // never destroyed: device objects may outlive main()
  return *impl;
}

}  // namespace syncmem::detail
