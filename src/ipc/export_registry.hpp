#pragma once

// The exports this process holds for importers: each keeps its owner (the
// memory), its control page and the backend's signal until its importer
// closes it or exits.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "ipc/control_page.hpp"
#include "syncmem/device_id.hpp"

namespace syncmem::detail::ipc {

struct export_record {
  std::shared_ptr<control_page> page;
  std::shared_ptr<const void> owner;
  device_id device;
  event_handle signal{};
  void* data = nullptr;  // the exported pointer, for an import by this same process
  std::size_t size = 0;
  std::vector<int> named;  // every descriptor the handle names, which the importer takes (fd_broker)
  std::vector<std::shared_ptr<const void>> held;  // keeps the backend's named descriptors open (ipc_export::held)
};

class export_registry {
 public:
  // The one registry; never destroyed, as exports may outlive main().
  [[nodiscard]] static export_registry& instance();

  void add(export_record record);
  // Releases the records whose importer closed them or exited.
  std::size_t collect();
  [[nodiscard]] std::size_t held();
  // Calls `send(named)` under the registry's lock, where named(fd) says
  // whether a held export names `fd`: none it names is closed meanwhile.
  template <class F>
  void with_named_files(F&& send) {
    std::lock_guard lock{mutex_};
    send([this](int fd) { return names(fd); });
  }
  // The record of `nonce`, for an import by the exporting process itself.
  [[nodiscard]] std::optional<export_record> find(std::uint64_t nonce);

 private:
  export_registry() = default;
  [[nodiscard]] bool names(int fd) const;  // under mutex_
  std::mutex mutex_;
  std::vector<export_record> records_;
};

}  // namespace syncmem::detail::ipc
