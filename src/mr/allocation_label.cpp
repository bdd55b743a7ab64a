#include "syncmem/mr/allocation_label.hpp"

#include <utility>

namespace syncmem::mr {
namespace {
thread_local std::string this_thread_label;
}

std::string_view current_allocation_label() noexcept { return this_thread_label; }

scoped_allocation_label::scoped_allocation_label(std::string_view label)
    : previous_{std::exchange(this_thread_label, std::string{label})} {}

scoped_allocation_label::~scoped_allocation_label() { this_thread_label = std::move(previous_); }

}  // namespace syncmem::mr
