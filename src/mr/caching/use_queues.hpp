#pragma once

// The uses of freed blocks that must complete before the blocks are reused,
// shared by the caching allocators: the device one (record_stream's pending
// frees) and the pinned host one (every stream a freed block was used on).
// Each use is an event recorded on a stream; a block counts its uses still
// queued (Block::pending_uses) and is handed back once the count is zero.
//
// Uses are queued per stream, in the order they were recorded: events of one
// stream complete in that order, so a poll stops at a stream's first busy
// event, and one query settles a whole stream when its newest event is done.
// (RMM's stream_ordered_memory_resource keys its free lists the same way; its
// blocks are reusable in stream order at once, so it needs no such queues.)
//
// The Policy says what an event is and how to ask about it:
//   using event_type = ...;                       // movable
//   bool passed(const event_type&);               // never blocks
//   void wait(const event_type&);                 // blocks until it has passed
//   void release(event_type&&) noexcept;          // it has passed: for reuse
// Not thread-safe: the allocator calls it under its lock.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <utility>

#include "backend/cuda_stream_handles.hpp"
#include "syncmem/device_id.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::mr::detail::caching {

// A stream, as a key: events recorded on one stream complete in order.
struct stream_key {
  device_id device;
  stream_handle handle;

  friend bool operator<(const stream_key& a, const stream_key& b) noexcept {
    if (a.device != b.device) return a.device < b.device;
    return std::less<stream_handle>{}(a.handle, b.handle);
  }
};

template <class Block, class Policy>
class use_queues {
 public:
  using event_type = typename Policy::event_type;

  explicit use_queues(Policy policy) : policy_{std::move(policy)} {}
  use_queues(const use_queues&) = delete;
  use_queues& operator=(const use_queues&) = delete;

  // `b` may not be reused before `e`, recorded on `stream`, has passed. If it
  // throws (out of memory), nothing changed and `e` is still the caller's.
  void add(stream_key stream, event_type&& e, Block* b) {
    auto [it, made] = queues_.try_emplace(stream);
    if (made) it->second.one_stream = names_one_stream(stream.handle);
    try {
      it->second.uses.emplace_back(std::move(e), b);
    } catch (...) {
      if (it->second.uses.empty()) queues_.erase(it);
      throw;
    }
    ++b->pending_uses;
    ++size_;
  }

  // Never blocks: retires the uses that have passed, and calls on_ready(b)
  // for each block whose last use that was.
  template <class F>
  void poll(F&& on_ready) {
    for (auto it = queues_.begin(); it != queues_.end();) {
      auto& uses = it->second.uses;
      if (uses.size() > 1 && it->second.one_stream && policy_.passed(uses.back().done)) {
        while (!uses.empty()) complete_front(uses, on_ready);
      } else {
        while (!uses.empty() && policy_.passed(uses.front().done)) complete_front(uses, on_ready);
      }
      it = uses.empty() ? queues_.erase(it) : std::next(it);
    }
  }

  // Blocks until every queued use has passed; poll then retires them.
  void wait_all() {
    for (auto& [key, q] : queues_) {
      for (const auto& u : q.uses) policy_.wait(u.done);
    }
  }

  // Waits for each use in turn and retires it, whatever the wait said (for
  // the allocator's destructor: the device may be gone).
  template <class F>
  void drain(F&& on_ready) {
    for (auto& [key, q] : queues_) {
      while (!q.uses.empty()) {
        policy_.wait(q.uses.front().done);
        complete_front(q.uses, on_ready);
      }
    }
    queues_.clear();
  }

  // `stream` is being destroyed, and its handle may name a new stream next:
  // what is queued under it no longer completes in one stream's order.
  void stream_gone(stream_key stream) noexcept {
    auto it = queues_.find(stream);
    if (it != queues_.end()) it->second.one_stream = false;
  }

  // Calls f(b) for each queued use's block (a block with several uses, several times).
  template <class F>
  void for_each_block(F&& f) const {
    for (const auto& [key, q] : queues_) {
      for (const auto& u : q.uses) f(u.b);
    }
  }

  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  // Uses queued, over all streams.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  struct use {
    use(event_type&& e, Block* block) : done{std::move(e)}, b{block} {}
    event_type done;
    Block* b;
  };
  struct stream_queue {
    std::deque<use> uses;
    bool one_stream = true;
  };

  // cudaStreamPerThread names a different stream on every thread: events
  // queued under that handle are not in one stream's order.
  static bool names_one_stream(stream_handle handle) noexcept {
    return handle != syncmem::detail::cuda_per_thread_stream();
  }

  template <class F>
  void complete_front(std::deque<use>& uses, F& on_ready) {
    Block* const b = uses.front().b;
    policy_.release(std::move(uses.front().done));
    uses.pop_front();
    --size_;
    if (--b->pending_uses == 0) on_ready(b);
  }

  Policy policy_;
  std::map<stream_key, stream_queue> queues_;
  std::size_t size_ = 0;
};

}  // namespace syncmem::mr::detail::caching
