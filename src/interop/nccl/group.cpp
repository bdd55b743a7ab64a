#include "syncmem/nccl/group.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "comm_backend.hpp"
#include "core/log.hpp"
#include "syncmem/device.hpp"
#include "syncmem/error.hpp"

namespace syncmem::nccl {

namespace detail {

thread_group& this_thread_group() noexcept {
  thread_local thread_group g;
  return g;
}

void launch_grouped(std::function<void()> launch) {
  auto& g = this_thread_group();
  if (g.depth == 0) {
    launch();
  } else {
    g.launches.push_back(std::move(launch));
  }
}

void note_call(const grouped_call& c) {
  auto& g = this_thread_group();
  if (g.depth > 0) g.calls.push_back(c);
}

void note_refused(const grouped_call& c) noexcept {
  auto& g = this_thread_group();
  if (g.depth == 0) return;
  try {
    g.calls.push_back(c);
  } catch (...) {
    g.lost_track = true;
  }
}

void after_enqueued(std::function<void()> f) {
  auto& g = this_thread_group();
  if (g.depth == 0) {
    f();
  } else {
    g.after_end.push_back(std::move(f));
  }
}

namespace {
bool overlap(const void* a, std::size_t an, const void* b, std::size_t bn) noexcept {
  const auto x = reinterpret_cast<std::uintptr_t>(a);
  const auto y = reinterpret_cast<std::uintptr_t>(b);
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}
}  // namespace

void claim_memory(const memory_use& use) {
  auto& g = this_thread_group();
  if (g.depth == 0) return;
  for (const auto& earlier : g.uses) {
    const char* mine = "writes";
    const char* theirs = nullptr;
    if (overlap(use.c.recv, use.write_bytes, earlier.c.recv, earlier.write_bytes)) {
      theirs = "writes";
    } else if (overlap(use.c.recv, use.write_bytes, earlier.c.send, earlier.read_bytes)) {
      theirs = "reads";
    } else if (overlap(use.c.send, use.read_bytes, earlier.c.recv, earlier.write_bytes)) {
      mine = "reads";
      theirs = "writes";
    } else {
      continue;
    }
    SYNCMEM_FAIL(
        fmt::format("{}: {} {} memory that {} of {} {}, earlier in the same nccl::group; NCCL runs the "
                    "calls of a group together, in no order: end the group between them",
                    communicator_name(use.rank, use.size, use.device), describe(use.c), mine, describe(earlier.c),
                    communicator_name(earlier.rank, earlier.size, earlier.device), theirs));
  }
  g.uses.push_back(use);
}

}  // namespace detail

namespace {
// Only CUDA ranks use NCCL; without a CUDA device no call can reach it, and
// NCCL is not asked to start.
bool uses_nccl() noexcept { return device_count(device_kind::cuda) > 0; }

using detail::collective;
using detail::grouped_call;

bool point_to_point(const grouped_call& c) { return c.c.kind == collective::send || c.c.kind == collective::recv; }

// Whether two ranks' calls of one collective agree (as NCCL needs them to).
bool same_collective(const detail::call& a, const detail::call& b) {
  if (a.kind != b.kind || a.count != b.count || a.type != b.type) return false;
  if ((a.kind == collective::all_reduce || a.kind == collective::reduce_scatter) && a.op != b.op) return false;
  return a.kind != collective::broadcast || a.peer == b.peer;
}

// Whether the ranks of one clique in `calls` (two or more of them) agree: the
// same collectives in the same order, and each send to another of them
// received by it, in order, with the same count and dtype.
bool agree(const std::map<int, std::vector<const grouped_call*>>& ranks) {
  const auto collectives = [](const std::vector<const grouped_call*>& list) {
    std::vector<const detail::call*> out;
    for (const auto* c : list) {
      if (!c->refused && !point_to_point(*c)) out.push_back(&c->c);
    }
    return out;
  };
  const auto first = collectives(ranks.begin()->second);
  for (const auto& [rank, list] : ranks) {
    const auto mine = collectives(list);
    if (mine.size() != first.size()) return false;
    for (std::size_t i = 0; i < mine.size(); ++i) {
      if (!same_collective(*mine[i], *first[i])) return false;
    }
  }
  const auto messages = [&](int from, int to, collective kind) {
    std::vector<const detail::call*> out;
    for (const auto* c : ranks.at(kind == collective::send ? from : to)) {
      if (!c->refused && c->c.kind == kind && c->c.peer == (kind == collective::send ? to : from)) {
        out.push_back(&c->c);
      }
    }
    return out;
  };
  for (const auto& [from, list] : ranks) {
    for (const auto& [to, other] : ranks) {
      if (from == to) continue;
      const auto sent = messages(from, to, collective::send);
      const auto received = messages(from, to, collective::recv);
      if (sent.size() != received.size()) return false;
      for (std::size_t i = 0; i < sent.size(); ++i) {
        if (sent[i]->count != received[i]->count || sent[i]->type != received[i]->type) return false;
      }
    }
  }
  return true;
}

// What the ranks of a clique that disagree called, for the error.
std::string calls_of(const std::map<int, std::vector<const grouped_call*>>& ranks) {
  std::string text;
  for (const auto& [rank, list] : ranks) {
    const grouped_call& any = *list.front();
    text += fmt::format("; {}:", detail::communicator_name(rank, any.size, any.device));
    const char* separator = " ";
    for (const auto* c : list) {
      text += separator;
      text += c->refused ? fmt::format("a refused {}", detail::to_string(c->c.kind)) : detail::describe(c->c);
      separator = ", ";
    }
  }
  return text;
}

// Why the group's calls may not be issued, or "".
std::string unmatched(const detail::thread_group& g) {
  if (g.lost_track) return "a refused call of the group could not be recorded";
  std::map<std::uint64_t, std::map<int, std::vector<const grouped_call*>>> cliques;
  for (const auto& c : g.calls) cliques[c.clique][c.rank].push_back(&c);
  for (const auto& [clique, ranks] : cliques) {
    // A rank alone in this thread's group may be driven by another thread or process.
    if (ranks.size() >= 2 && !agree(ranks)) {
      return "the calls of the ranks it drives do not match (NCCL would wait for ever)" + calls_of(ranks);
    }
  }
  return {};
}

// Issues the group's calls (NCCL's are still inside NCCL's group); returns
// the first failure, after which nothing more is issued.
std::string issue(std::vector<std::function<void()>>& launches) noexcept {
  for (auto& f : launches) {
    try {
      f();
    } catch (const std::exception& e) {
      return fmt::format("issuing a call at the end of the group failed: {}", e.what());
    } catch (...) {
      return "issuing a call at the end of the group failed";
    }
  }
  return {};
}

// Ends one level: at the outermost, checks the group's calls and issues them
// (or none), then ends NCCL's group where it was started, then runs what
// waited for the calls to be enqueued. Returns the error, or "".
std::string close_group() noexcept {
  auto& g = detail::this_thread_group();
  std::string error;
  const bool outermost = g.depth == 1;
  std::vector<std::function<void()>> after;
  if (outermost) {
    auto launches = std::move(g.launches);
    after = std::move(g.after_end);
    try {
      error = unmatched(g);
    } catch (...) {
      error = "checking the group's calls failed";
    }
    if (error.empty()) {
      error = issue(launches);
    } else {
      error += "; none of the group's calls was issued";
    }
    g.launches.clear();
    g.after_end.clear();
    g.uses.clear();
    g.calls.clear();
    g.lost_track = false;
  }
  const std::string nccl_error = uses_nccl() ? detail::nccl_group_end() : std::string{};
  --g.depth;
  if (!nccl_error.empty()) error = error.empty() ? nccl_error : error + "; " + nccl_error;
  if (!outermost || !error.empty()) return error;
  for (auto& f : after) {
    try {
      f();
    } catch (const std::exception& e) {
      syncmem::detail::report_failure(e, "nccl::group: enqueueing at the end of the group failed: {}", e.what());
    }
  }
  return error;
}

}  // namespace

group::group() {
  if (uses_nccl()) detail::nccl_group_start();
  ++detail::this_thread_group().depth;
}

group::~group() {
  if (!open_) return;
  open_ = false;
  const std::string error = close_group();
  if (!error.empty()) {
    try {
      syncmem::detail::logger().error("nccl::group: {}", error);
    } catch (...) {  // NOLINT(bugprone-empty-catch): reporting must not throw
    }
  }
}

void group::end() {
  SYNCMEM_EXPECTS(open_, "nccl::group::end: the group has ended already");
  open_ = false;
  const std::string error = close_group();
  if (!error.empty()) SYNCMEM_FAIL("nccl::group::end: " + error);
}

}  // namespace syncmem::nccl
