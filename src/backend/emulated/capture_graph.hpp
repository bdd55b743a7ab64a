#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace syncmem::detail::emulated {

class worker_stream;

// What capture_graph::end() leaves.
struct capture_ended {
  std::vector<std::function<void()>> ops;  // in an order that keeps every dependency
  std::vector<worker_stream*> forked;      // the streams forked into it, to leave it
  std::string failure;                     // why no graph was made, or empty
};

// A capture into an emulated graph: the work of the stream that began it and
// of every stream forked into it (one that waited for an event recorded in
// the capture), kept as nodes in the order they were recorded. A node is
// recorded after its dependencies, so that order is one the graph may run in,
// and a launch runs the nodes in it on one stream.
class capture_graph {
 public:
  using node_id = std::size_t;

  explicit capture_graph(worker_stream* origin);
  capture_graph(const capture_graph&) = delete;
  capture_graph& operator=(const capture_graph&) = delete;

  // The capture's number, the same for every stream in it (as CUDA's capture sequence id).
  [[nodiscard]] unsigned long long id() const noexcept { return id_; }
  [[nodiscard]] worker_stream* origin() const noexcept { return origin_; }

  // Records `op` on `w`: it runs after what `w` has recorded or waited for so far.
  void add(worker_stream* w, std::function<void()> op);
  // What work recorded next on `w` would depend on.
  [[nodiscard]] std::vector<node_id> frontier(worker_stream* w);
  // `w` waits for `nodes` (an event recorded in this capture); a stream that
  // was not in the capture joins it. Throws syncmem::unsupported_error once
  // the capture has ended.
  void wait(worker_stream* w, const std::vector<node_id>& nodes);
  // Whether work recorded next on `w` would run after every one of `nodes`.
  [[nodiscard]] bool follows(worker_stream* w, const std::vector<node_id>& nodes);
  // Makes end() fail with `why`; the first reason wins.
  void invalidate(const std::string& why);
  // `w`, a stream forked into the capture, is being destroyed: the capture
  // forgets it and cannot end well any more.
  void forget(worker_stream* w);

  // Ends the capture. It fails where it was invalidated, or where a forked
  // stream's work was not joined back into the origin stream before the end
  // (cudaErrorStreamCaptureUnjoined).
  [[nodiscard]] capture_ended end();

 private:
  struct node {
    std::function<void()> op;
    std::vector<node_id> after;
  };

  // Under mutex_: whether `from` (with their ancestors) include every one of `nodes`.
  [[nodiscard]] bool reaches(const std::vector<node_id>& from, const std::vector<node_id>& nodes) const;

  const unsigned long long id_;
  worker_stream* const origin_;
  std::mutex mutex_;
  std::vector<node> nodes_;
  std::map<worker_stream*, std::vector<node_id>> frontiers_;  // every stream in the capture
  std::string invalidated_;
  bool ended_ = false;
};

}  // namespace syncmem::detail::emulated
