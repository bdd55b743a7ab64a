#include "backend/vmm_mappings.hpp"

#include <fmt/format.h>

#include "syncmem/error.hpp"

namespace syncmem::detail {
namespace {
std::uintptr_t address_of(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
}  // namespace

void vmm_mappings::reserved(const void* p, std::size_t bytes) {
  std::lock_guard lock{mutex_};
  reserved_[address_of(p)] = bytes;
}

void vmm_mappings::freed(const void* p) {
  std::lock_guard lock{mutex_};
  reserved_.erase(address_of(p));
}

void vmm_mappings::mapped(const void* p, std::size_t bytes, physical_handle h) {
  std::lock_guard lock{mutex_};
  mapped_[address_of(p)] = piece{address_of(p), bytes, h};
}

void vmm_mappings::unmapped(const void* p, std::size_t bytes) {
  const auto start = address_of(p);
  std::lock_guard lock{mutex_};
  mapped_.erase(mapped_.lower_bound(start), mapped_.lower_bound(start + bytes));
}

bool vmm_mappings::in_reserved(const void* p) const {
  const auto at = address_of(p);
  std::lock_guard lock{mutex_};
  auto it = reserved_.upper_bound(at);
  if (it == reserved_.begin()) return false;
  --it;
  return at < it->first + it->second;
}

std::vector<vmm_mappings::piece> vmm_mappings::pieces(const void* p, std::size_t bytes) const {
  const auto start = address_of(p);
  const auto not_mapped = [&] {
    return fmt::format("ipc export: [{}, +{}) is not all mapped memory of the growable range", p, bytes);
  };
  std::vector<piece> out;
  std::lock_guard lock{mutex_};
  auto it = mapped_.upper_bound(start);
  SYNCMEM_EXPECTS(it != mapped_.begin(), not_mapped());
  --it;
  std::uintptr_t at = it->first;
  SYNCMEM_EXPECTS(at + it->second.size > start, not_mapped());
  for (; it != mapped_.end() && it->first < start + bytes; ++it) {
    SYNCMEM_EXPECTS(it->first == at, not_mapped());
    out.push_back(it->second);
    at += it->second.size;
  }
  SYNCMEM_EXPECTS(at >= start + bytes, not_mapped());
  return out;
}

}  // namespace syncmem::detail
