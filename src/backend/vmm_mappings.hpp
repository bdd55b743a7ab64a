#pragma once

// What a virtual memory capability has reserved and mapped where, for
// sharing mapped memory with another process (the ipc capability asks which
// physical allocations back a range).

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "backend/handles.hpp"

namespace syncmem::detail {

class vmm_mappings {
 public:
  struct piece {
    std::uintptr_t address;
    std::size_t size;
    physical_handle handle;
  };

  void reserved(const void* p, std::size_t bytes);
  void freed(const void* p);
  void mapped(const void* p, std::size_t bytes, physical_handle h);
  void unmapped(const void* p, std::size_t bytes);

  // Whether p lies in a reserved range.
  [[nodiscard]] bool in_reserved(const void* p) const;
  // The mappings that cover [p, p + bytes), in address order; throws
  // syncmem::logic_error where part of it is not mapped.
  [[nodiscard]] std::vector<piece> pieces(const void* p, std::size_t bytes) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> reserved_;
  std::map<std::uintptr_t, piece> mapped_;  // by where each mapping starts
};

}  // namespace syncmem::detail
