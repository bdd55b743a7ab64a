#pragma once

/// @file nccl/group.hpp
/// @brief nccl::group: the calls of several ranks (or several calls of one)
/// made by one thread, issued together (ncclGroupStart / ncclGroupEnd).

namespace syncmem::nccl {

/// @brief Between construction and destruction, collectives and send/recv
/// calls are collected and issued together when the outermost group ends
/// (ncclGroupEnd): one thread driving several ranks of a communicator must
/// use one, as must a rank that sends and receives with one peer at once.
/// Groups nest. Emulated communicators also enqueue grouped calls when the
/// outermost group ends, as NCCL does.
///
/// When the outermost group ends, the calls of the ranks of each
/// communicator that it holds two or more ranks of are checked before any is
/// issued: the same collectives in the same order (kind, count, dtype,
/// reduction, root), and every send received, in order, with the same count
/// and dtype. A call refused on one rank (its exception thrown at the call)
/// and made on another fails that check. Such a group issues none of its
/// calls, since NCCL would wait for ever for the missing or different ones;
/// end() throws, saying what each rank called. A call refused on every rank
/// alike leaves the others to be issued. The communicators must outlive the
/// groups that hold their calls (as with NCCL).
///
/// Thread safety: a group belongs to the thread that made it.
class group {
 public:
  /// @brief ncclGroupStart (where NCCL is built in).
  group();
  /// @brief ncclGroupEnd; a failure is reported (logged), never thrown: call
  /// end() to see it as an exception.
  ~group();
  group(const group&) = delete;
  group& operator=(const group&) = delete;

  /// @brief Ends the group now (ncclGroupEnd).
  /// @throws syncmem::logic_error when the ranks' calls do not match (none was
  /// issued) or issuing them failed, naming NCCL's error where it has one
  void end();

 private:
  bool open_ = true;
};

}  // namespace syncmem::nccl
