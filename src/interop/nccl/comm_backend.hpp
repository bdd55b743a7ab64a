#pragma once

// What a communicator's rank does once its arguments are checked: NCCL's
// calls on CUDA devices (cuda/nccl_comm.cpp), the host implementation on
// emulated devices (emulated_comm.cpp).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "syncmem/device_id.hpp"
#include "syncmem/dtype.hpp"
#include "syncmem/nccl/communicator.hpp"
#include "syncmem/stream.hpp"

namespace syncmem::nccl::detail {

enum class collective : std::uint8_t { all_reduce, broadcast, all_gather, reduce_scatter, send, recv };

[[nodiscard]] const char* to_string(collective kind) noexcept;

// One call of one rank, checked. `count` is in elements of `type`: the send
// count of all_gather, the receive count of reduce_scatter. `peer` is the
// root of broadcast and the other rank of send and recv.
struct call {
  collective kind = collective::all_reduce;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  dtype type = dtype::uint8;
  reduce_op op = reduce_op::sum;
  int peer = 0;
  // Whether a buffer of the call lies in memory registered with the
  // communicator (known to the emulated backend, which checks that ranks agree).
  bool registered = false;
};

// "all_reduce of 1024 float32 (sum)", "send of 16 int8 to rank 1".
[[nodiscard]] std::string describe(const call& c);
// The same, saying whether its memory is registered.
[[nodiscard]] std::string describe_registration(const call& c);

class comm_backend {
 public:
  comm_backend() = default;
  comm_backend(const comm_backend&) = delete;
  comm_backend& operator=(const comm_backend&) = delete;
  virtual ~comm_backend() = default;

  // Enqueues `c` on `s` (a stream of the rank's device).
  virtual void enqueue(const call& c, stream_view s) = 0;
  // A handle for [base, base + bytes), or nullptr when refused (with why).
  [[nodiscard]] virtual void* register_buffer(void* base, std::size_t bytes, std::string& why) noexcept = 0;
  virtual void deregister_buffer(void* handle) noexcept = 0;
};

// "nccl communicator rank 0 of 2 on cuda:0".
[[nodiscard]] std::string communicator_name(int rank, int size, device_id device);

// One call of a group and the memory it uses: it reads `read_bytes` from
// c.send and writes `write_bytes` to c.recv. Names are made only for errors.
struct memory_use {
  call c;
  std::size_t read_bytes = 0;
  std::size_t write_bytes = 0;
  int rank = 0;
  int size = 1;
  device_id device = device_id::cuda(0);
};

// A call made in a group, as the group's end checks it: the ranks made
// together (create_all) or joined by one id form a clique, and the ranks of a
// clique that one thread drives in one group must make matching calls.
// A refused call carries only its kind.
struct grouped_call {
  std::uint64_t clique = 0;
  int rank = 0;
  int size = 1;
  device_id device = device_id::cuda(0);
  call c;
  bool refused = false;
};

// The nccl::group of the calling thread. NCCL enqueues a grouped call on its
// stream only when the outermost group ends, so work that must follow the
// call (an event recorded after it) waits until then. Both backends hold a
// group's calls back until then too, so that its end can check them before
// any reaches a stream: a call refused on one rank but made on another, or
// calls that differ across ranks, would leave the others waiting for ever
// (NCCL hangs); such a group issues none of its calls.
struct thread_group {
  int depth = 0;
  std::vector<std::function<void()>> launches;   // the calls, in call order
  std::vector<std::function<void()>> after_end;  // what must follow the calls
  std::vector<memory_use> uses;                  // the memory of the group's calls so far
  std::vector<grouped_call> calls;               // what the end checks
  bool lost_track = false;                       // a refusal could not be recorded: issue nothing
};
[[nodiscard]] thread_group& this_thread_group() noexcept;
// Inside a group, refuses a call that writes memory an earlier call of the
// group reads or writes, or reads memory one writes (NCCL fuses a group's
// calls into one launch and runs them in no order), then records its memory.
// Outside a group, does nothing.
void claim_memory(const memory_use& use);
// Enqueues a call now, or when the calling thread's outermost group ends.
void launch_grouped(std::function<void()> launch);
// Inside a group, records a call for the end's check (outside, does nothing).
void note_call(const grouped_call& c);
// Inside a group, records a refused call; if that fails, the group issues nothing.
void note_refused(const grouped_call& c) noexcept;
// Runs `f` now, or when the calling thread's outermost group ends, after its calls.
void after_enqueued(std::function<void()> f);

// The emulated host implementation.
[[nodiscard]] std::vector<std::unique_ptr<comm_backend>> make_emulated_all(std::span<const device_id> devices);
[[nodiscard]] std::unique_ptr<comm_backend> make_emulated_rank(const unique_id& id, int nranks, int rank,
                                                               device_id device);
[[nodiscard]] unique_id make_emulated_id();

// NCCL (cuda/nccl_comm.cpp).
[[nodiscard]] std::vector<std::unique_ptr<comm_backend>> make_nccl_all(std::span<const device_id> devices);
[[nodiscard]] std::unique_ptr<comm_backend> make_nccl_rank(const unique_id& id, int nranks, int rank, device_id device);
[[nodiscard]] unique_id make_nccl_id();
void nccl_group_start();
// Returns NCCL's error as text, or "" on success.
[[nodiscard]] std::string nccl_group_end() noexcept;

// How the communicators of one device kind are made.
struct comm_factory {
  std::vector<std::unique_ptr<comm_backend>> (*make_all)(std::span<const device_id> devices);
  std::unique_ptr<comm_backend> (*make_rank)(const unique_id& id, int nranks, int rank, device_id device);
  unique_id (*make_id)();
};
[[nodiscard]] const comm_factory& comm_factory_for(device_kind kind) noexcept;

}  // namespace syncmem::nccl::detail
