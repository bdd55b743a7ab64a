#include "syncmem/mr/tracking_adaptor.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "core/ignored_failure.hpp"
#include "core/log.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/allocation_label.hpp"

namespace syncmem::mr {

namespace {
constexpr std::size_t oldest_listed = 10;
}

tracking_adaptor::tracking_adaptor(memory_resource& upstream) : adaptor_base{upstream} {}

tracking_adaptor::~tracking_adaptor() {
  try {
    if (auto report = leak_report(); !report.empty()) syncmem::detail::logger().warn("{}", report);
  } catch (...) {
    // a destructor does not throw
    syncmem::detail::log_ignored("reporting leaks in tracking_adaptor's destructor");
  }
}

std::vector<tracked_allocation> tracking_adaptor::live_allocations() const {
  std::vector<tracked_allocation> out;
  {
    std::lock_guard lock{mutex_};
    out.reserve(live_.size());
    for (const auto& entry : live_) out.push_back(entry.second);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.sequence < b.sequence; });
  return out;
}

std::size_t tracking_adaptor::live_count() const {
  std::lock_guard lock{mutex_};
  return live_.size();
}

std::size_t tracking_adaptor::live_bytes() const {
  std::lock_guard lock{mutex_};
  return live_bytes_;
}

std::string tracking_adaptor::leak_report() const {
  const auto live = live_allocations();
  if (live.empty()) return {};
  struct group {
    std::size_t count = 0;
    std::size_t bytes = 0;
  };
  std::map<std::string, group> by_label;
  std::size_t total = 0;
  for (const auto& a : live) {
    auto& g = by_label[a.label];
    ++g.count;
    g.bytes += a.bytes;
    total += a.bytes;
  }
  std::vector<std::pair<std::string, group>> groups(by_label.begin(), by_label.end());
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.second.bytes > b.second.bytes; });
  auto label_text = [](const std::string& label) {
    return label.empty() ? std::string{"(no label)"} : "'" + label + "'";
  };
  std::string text = fmt::format("{}: {} live allocation{}, {}", name(), live.size(), live.size() == 1 ? "" : "s",
                                 syncmem::detail::format_bytes(total));
  for (const auto& [label, g] : groups) {
    text += fmt::format("\n  {}: {} allocation{}, {}", label_text(label), g.count, g.count == 1 ? "" : "s",
                        syncmem::detail::format_bytes(g.bytes));
  }
  text += "\n  oldest:";
  for (std::size_t i = 0; i < std::min(live.size(), oldest_listed); ++i) {
    const auto& a = live[i];
    text += fmt::format("\n    #{} {} {} {} on stream {:#x}", a.sequence, a.pointer,
                        syncmem::detail::format_bytes(a.bytes), label_text(a.label), a.stream);
  }
  if (live.size() > oldest_listed) text += fmt::format("\n    ... and {} more", live.size() - oldest_listed);
  return text;
}

void* tracking_adaptor::do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) {
  tracked_allocation a;
  a.bytes = bytes;
  a.alignment = alignment;
  a.label = std::string{current_allocation_label()};
  a.stream = static_cast<std::uintptr_t>(stream.handle());
  void* p = upstream().allocate(bytes, stream, alignment);
  a.pointer = p;
  try {
    std::lock_guard lock{mutex_};
    a.sequence = next_sequence_++;
    live_bytes_ += bytes;
    live_.insert_or_assign(p, std::move(a));
  } catch (...) {
    upstream().deallocate(p, bytes, stream, alignment);
    throw;
  }
  return p;
}

void tracking_adaptor::do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept {
  {
    std::lock_guard lock{mutex_};
    auto it = live_.find(p);
    if (it == live_.end()) {
      try {
        syncmem::detail::logger().error(
            "{}: deallocate of {} ({} bytes), which is not a live allocation of this "
            "adaptor (a double free, or memory from elsewhere); not forwarded",
            name(), p, bytes);
      } catch (...) {  // NOLINT(bugprone-empty-catch): deallocate does not throw
      }
      return;
    }
    if (it->second.bytes != bytes) {
      try {
        syncmem::detail::logger().error("{}: deallocate of {} with {} bytes, but {} were allocated", name(), p, bytes,
                                        it->second.bytes);
      } catch (...) {  // NOLINT(bugprone-empty-catch)
      }
      bytes = it->second.bytes;
    }
    live_bytes_ -= bytes;
    live_.erase(it);
  }
  upstream().deallocate(p, bytes, stream, alignment);
}

bool tracking_adaptor::do_is_equal(const memory_resource& other) const noexcept {
  // Memory of one tracking adaptor cannot be freed through another: it would
  // not find the allocation.
  (void)other;
  return false;
}

}  // namespace syncmem::mr
