#pragma once

/// @file mr/adaptor_base.hpp
/// @brief What every adaptor shares: its upstream, and what it takes from it.

#include <string>

#include "syncmem/mr/memory_resource.hpp"

namespace syncmem::mr {

/// @brief The base of the adaptors (statistics, tracking, limiting, logging,
/// failure): it takes the upstream in the constructor and exposes it, takes
/// the upstream's device, kind and alignment, is named
/// "<Derived::adaptor_name>(<upstream's name>)", and is equal to an adaptor of
/// the same type over an equal upstream. `Derived` adds one behaviour in its
/// do_allocate and do_deallocate.
template <class Derived>
class adaptor_base : public memory_resource {
 public:
  /// @brief The resource allocations go to.
  [[nodiscard]] memory_resource& upstream() const noexcept { return *upstream_; }
  [[nodiscard]] std::string name() const override {
    return std::string{Derived::adaptor_name} + "(" + upstream_->name() + ")";
  }

 protected:
  /// @param upstream the resource allocations go to; must outlive the adaptor
  explicit adaptor_base(memory_resource& upstream) noexcept
      : memory_resource{upstream.kind(), upstream.device(), upstream.max_alignment()}, upstream_{&upstream} {}

 private:
  [[nodiscard]] bool do_is_equal(const memory_resource& other) const noexcept override {
    const auto* o = dynamic_cast<const Derived*>(&other);
    return o != nullptr && o->upstream().is_equal(upstream());
  }

  memory_resource* upstream_;
};

}  // namespace syncmem::mr
