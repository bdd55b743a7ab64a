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
  /// @throws syncmem::cuda_error naming NCCL's error when issuing the calls failed
  void end();

 private:
  bool open_ = true;
};

}  // namespace syncmem::nccl
