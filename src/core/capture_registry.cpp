#include "core/capture_registry.hpp"

#include <utility>

namespace syncmem::detail {

graph_pool_state::~graph_pool_state() {
  // Released newest first: a block freed during a capture goes back to its
  // resource before that resource's private pool of this graph_pool goes.
  while (!held_.empty()) held_.pop_back();
}

void graph_pool_state::hold(std::shared_ptr<void> what) {
  std::lock_guard lock{mutex_};
  held_.push_back(std::move(what));
}

}  // namespace syncmem::detail
