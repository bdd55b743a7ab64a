#include "backend/emulated/capture_graph.hpp"

#include <algorithm>
#include <atomic>
#include <set>
#include <utility>

#include "syncmem/error.hpp"

namespace syncmem::detail::emulated {
namespace {
std::atomic<unsigned long long> next_id{1};
}  // namespace

capture_graph::capture_graph(worker_stream* origin) : id_{next_id.fetch_add(1)}, origin_{origin} { frontiers_[origin]; }

void capture_graph::add(worker_stream* w, std::function<void()> op) {
  std::lock_guard lock{mutex_};
  auto& frontier = frontiers_[w];
  nodes_.push_back({std::move(op), std::move(frontier)});
  frontier = {nodes_.size() - 1};
}

std::vector<capture_graph::node_id> capture_graph::frontier(worker_stream* w) {
  std::lock_guard lock{mutex_};
  return frontiers_[w];
}

void capture_graph::wait(worker_stream* w, const std::vector<node_id>& nodes) {
  std::lock_guard lock{mutex_};
  if (ended_) {
    SYNCMEM_UNSUPPORTED(
        "an event wait for an event last recorded in a capture that has ended: record it again outside the capture");
  }
  auto& frontier = frontiers_[w];
  for (const node_id n : nodes) {
    if (std::find(frontier.begin(), frontier.end(), n) == frontier.end()) frontier.push_back(n);
  }
}

bool capture_graph::follows(worker_stream* w, const std::vector<node_id>& nodes) {
  std::lock_guard lock{mutex_};
  return reaches(frontiers_[w], nodes);
}

void capture_graph::invalidate(const std::string& why) {
  std::lock_guard lock{mutex_};
  if (invalidated_.empty()) invalidated_ = why;
}

void capture_graph::forget(worker_stream* w) {
  std::lock_guard lock{mutex_};
  if (frontiers_.erase(w) > 0 && invalidated_.empty()) invalidated_ = "the destruction of a stream forked into it";
}

bool capture_graph::reaches(const std::vector<node_id>& from, const std::vector<node_id>& nodes) const {
  std::set<node_id> wanted{nodes.begin(), nodes.end()};
  std::vector<node_id> todo{from};
  std::set<node_id> seen{from.begin(), from.end()};
  while (!todo.empty() && !wanted.empty()) {
    const node_id n = todo.back();
    todo.pop_back();
    wanted.erase(n);
    for (const node_id parent : nodes_.at(n).after) {
      if (seen.insert(parent).second) todo.push_back(parent);
    }
  }
  return wanted.empty();
}

capture_ended capture_graph::end() {
  std::lock_guard lock{mutex_};
  ended_ = true;
  capture_ended out;
  out.failure = invalidated_;
  const auto& joined = frontiers_[origin_];
  for (const auto& [w, frontier] : frontiers_) {
    if (w == origin_) continue;
    out.forked.push_back(w);
    if (out.failure.empty() && !reaches(joined, frontier)) {
      out.failure = "a stream forked into it whose work was not joined back into the capturing stream";
    }
  }
  if (out.failure.empty()) {
    out.ops.reserve(nodes_.size());
    for (auto& n : nodes_) out.ops.push_back(std::move(n.op));
  }
  nodes_.clear();
  return out;
}

}  // namespace syncmem::detail::emulated
