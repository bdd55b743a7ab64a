#pragma once

/// @file mr/failure_adaptor.hpp
/// @brief Fails chosen allocations, to test what happens when memory runs out.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "syncmem/mr/adaptor_base.hpp"

namespace syncmem::mr {

/// @brief Forwards to its upstream, except for the allocations a predicate
/// chooses: those throw syncmem::out_of_memory (its hint says it was
/// injected) without reaching the upstream. For tests.
///
/// Device, kind and alignment are the upstream's; see memory_resource for the
/// contract. Thread safety: as every resource; calls are numbered in the
/// order they take the adaptor's counter.
class failure_adaptor final : public adaptor_base<failure_adaptor> {
 public:
  static constexpr const char* adaptor_name = "failure_adaptor";

  /// @brief Decides whether allocate call number `call` (counted from 1 over
  /// the adaptor's life) of `bytes` on `stream` fails.
  using predicate = std::function<bool(std::uint64_t call, std::size_t bytes, stream_view stream)>;

  /// @brief Fails call `n` only (counted from 1).
  [[nodiscard]] static predicate nth(std::uint64_t n);
  /// @brief Fails calls n, 2n, 3n, ...
  [[nodiscard]] static predicate every_nth(std::uint64_t n);
  /// @brief Fails every request larger than `bytes`.
  [[nodiscard]] static predicate larger_than(std::size_t bytes);
  /// @brief Fails every call.
  [[nodiscard]] static predicate always();

  /// @param upstream the resource allocations go to; must outlive the adaptor
  /// @param should_fail the calls to fail; empty fails none
  explicit failure_adaptor(memory_resource& upstream, predicate should_fail = {});

  /// @brief Replaces the predicate (empty fails none); the call count goes on.
  void set_predicate(predicate should_fail);
  /// @brief Allocate calls so far (with nonzero sizes).
  [[nodiscard]] std::uint64_t calls() const noexcept { return calls_.load(std::memory_order_relaxed); }
  /// @brief Allocations failed on purpose so far.
  [[nodiscard]] std::uint64_t failures() const noexcept { return failures_.load(std::memory_order_relaxed); }

 private:
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream, std::size_t alignment) noexcept override;

  mutable std::mutex mutex_;
  std::shared_ptr<const predicate> should_fail_;
  std::atomic<std::uint64_t> calls_{0};
  std::atomic<std::uint64_t> failures_{0};
};

}  // namespace syncmem::mr
