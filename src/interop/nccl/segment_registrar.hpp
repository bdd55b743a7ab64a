#pragma once

// Registers each segment of one caching_resource with one rank's
// communicator (ncclCommRegister), so that collectives on cached memory need
// no copy; deregisters a segment before the resource releases it.

#include <atomic>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "comm_backend.hpp"
#include "syncmem/mr/segment_observer.hpp"
#include "syncmem/nccl/communicator.hpp"

namespace syncmem::nccl::detail {

class segment_registrar final : public mr::segment_observer {
 public:
  segment_registrar(comm_backend& backend, std::string owner) : backend_{backend}, owner_{std::move(owner)} {}

  void segment_added(void* base, std::size_t bytes) noexcept override;
  void segment_releasing(void* base, std::size_t bytes) noexcept override;
  void resource_destroyed() noexcept override { gone_ = true; }
  // Whether the resource was destroyed (it must not be called any more).
  [[nodiscard]] bool resource_gone() const noexcept { return gone_; }

  // After the resource stopped telling it: deregisters what is left.
  void release_all() noexcept;

  [[nodiscard]] registration_statistics statistics() const;

 private:
  struct entry {
    void* handle;
    std::size_t bytes;
  };
  void drop(const entry& e) noexcept;

  comm_backend& backend_;
  const std::string owner_;
  mutable std::mutex mutex_;
  std::map<void*, entry> handles_;
  registration_statistics stats_;
  std::atomic<bool> gone_{false};
};

}  // namespace syncmem::nccl::detail
