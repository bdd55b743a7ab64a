// A program whose syncmem objects are destroyed after main() returns: statics
// made before the CUDA runtime starts (so they are destroyed after its own
// exit handlers have run), thread-locals of the main thread and of a worker,
// and memory still held by the allocators. It must exit 0 and print nothing.
//
//   teardown_child [return|exit]

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "syncmem/event.hpp"
#include "syncmem/mr/per_device_resource.hpp"
#include "syncmem/synced_memory.hpp"
#include "syncmem/syncmem.hpp"

namespace {

// Constructed before main, so before the CUDA runtime registers its exit
// handlers; destroyed after them.
struct statics {
  std::optional<syncmem::synced_memory> buffer;
  std::optional<syncmem::synced_memory> pageable;
  std::optional<syncmem::stream> stream;
  std::optional<syncmem::event> event;
  std::vector<syncmem::synced_memory> many;
  void* raw = nullptr;
  std::optional<syncmem::device_id> raw_device;
  ~statics() {
    if (raw != nullptr) {
      syncmem::mr::get_per_device_resource(*raw_device).deallocate(raw, 1 << 20, syncmem::default_stream(*raw_device));
    }
  }
} objects;

thread_local std::optional<syncmem::synced_memory> per_thread;

void use(syncmem::synced_memory& m, syncmem::stream_view s) {
  std::memset(m.mutable_host_data(), 7, m.size());
  (void)m.mutable_device_data(s);
  m.prefetch_to_host(s);  // left in flight at exit
}

}  // namespace

int main(int argc, char** argv) {
  const auto device = syncmem::current_device();
  objects.stream.emplace(device);
  objects.event.emplace(device);
  objects.buffer.emplace(std::size_t{1} << 20, device, syncmem::synced_memory_options{.label = "static"});
  use(*objects.buffer, *objects.stream);
  objects.pageable.emplace(std::size_t{4} << 20, device,
                           syncmem::synced_memory_options{.host_kind = syncmem::host_memory_kind::pageable});
  use(*objects.pageable, syncmem::default_stream(device));
  for (int i = 0; i < 8; ++i) {
    objects.many.emplace_back(std::size_t{1000} * static_cast<std::size_t>(i + 1), device);
    (void)objects.many.back().device_data();
  }
  objects.event->record(*objects.stream);
  objects.raw_device = device;
  objects.raw = syncmem::mr::get_per_device_resource(device).allocate(1 << 20, syncmem::default_stream(device));
  per_thread.emplace(4096, device);
  use(*per_thread, syncmem::default_stream(device));
  std::thread{[device] {
    per_thread.emplace(8192, device);
    use(*per_thread, syncmem::default_stream(device));
  }}.join();
  if (argc > 1 && std::strcmp(argv[1], "exit") == 0) std::exit(0);
  return 0;
}
