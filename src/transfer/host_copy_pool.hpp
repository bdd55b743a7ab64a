#pragma once

// Host-side copies spread over a pool of threads, for the transfer engine's
// staged copies and host-to-host copies. One thread cannot keep up with a
// PCIe Gen5 link (a copy from pageable memory runs at 10-20 GB/s per core),
// and the first touch of fresh pageable memory is page faults, which several
// threads take in parallel.
//
// A copy is a job: its bytes are cut into chunks (one staging buffer each)
// and each chunk into pieces. Pool threads claim pieces one at a time from
// every chunk the caller has opened, so that no thread waits at the end of a
// chunk for the slowest piece while there is work in the next one: the
// caller opens chunks ahead (as staging buffers come free) and finishes them
// in order (helping with the pieces of the chunk it waits for). Workers spin
// a millisecond before they sleep, so that back-to-back copies find them awake.
//
// Demoting later: a thread of a from_staging job that demotes the staging
// lines it has read does so after it has reported its piece done, when it
// would otherwise wait (at a gate, for the rest of a chunk, for work), so
// that demoting, which takes longer than the copy itself, is not on the
// copy's critical path (bench/tuning/transfer_timeline.cpp shows both). A
// thread keeps the last 64 ranges it has read: when more come (a batch's many
// small downloads), it drops the oldest rather than demote them then. The
// caller too keeps its share for its next wait in a job (usually its next
// copy's), as demoting it when the job ends held a 16 MiB download's return
// back by 100 us and more (transfer/d2h-interleaved). A thread may thus
// demote lines after the job has ended and its buffers have been freed:
// CLDEMOTE is a hint that faults on no address and changes no byte.

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

namespace syncmem {
class event;
}

namespace syncmem::detail {

class host_copy_pool {
 public:
  class job;

  // The process-wide pool. Never destroyed; its threads sleep until exit.
  [[nodiscard]] static host_copy_pool& instance();

  // Copies `bytes` bytes from `src` to `dst` (not overlapping) with up to
  // `threads` threads, the caller included. Small copies stay on the caller.
  void copy(void* dst, const void* src, std::size_t bytes, int threads);

  // Wakes enough sleeping pool threads for a job of `threads` threads that is
  // about to start, so that they are spinning when its first chunk opens
  // (waking a sleeping thread takes tens of microseconds).
  void wake(int threads);

  // Threads used when none are asked for: half the cores, at most 8.
  [[nodiscard]] static int default_threads() noexcept;
  // Copies one piece, with streaming (non-temporal) stores when it is large.
  // Streaming stores skip reading the destination into the cache first, and
  // leave no dirty lines behind that a DMA reading the destination next would
  // have to fetch from the cores' caches (bench/tuning/engine_tuning.cpp).
  // Pieces are written with the widest streaming stores the CPU has
  // (widest_streaming_store).
  static void copy_piece(void* dst, const void* src, std::size_t bytes) noexcept;
  // Copies with streaming stores of `store_bytes` bytes each (64: AVX-512,
  // 16: SSE2), or of the widest the CPU has below that; memcpy where it has
  // none. Any size and alignment: the ends are copied with memcpy.
  static void copy_streaming(void* dst, const void* src, std::size_t bytes, int store_bytes) noexcept;
  // 64 where the CPU has AVX-512, 16 where it has SSE2, else 0.
  [[nodiscard]] static int widest_streaming_store() noexcept;
  // Whether demote does anything on this CPU (CLDEMOTE).
  [[nodiscard]] static bool can_demote() noexcept;
  // Moves the cache lines of a range out of this core's private caches into
  // the shared cache (CLDEMOTE, where the CPU has it; nothing elsewhere), so
  // that the next DMA reading or writing them does not have to fetch them from
  // a core's private cache, which runs it far slower. Short downloads demote
  // what they have read, large uploads the last chunks they write.
  static void demote(const void* p, std::size_t bytes) noexcept;
  // Staging ranges that threads have handed to demote, in bytes, since the
  // process started (for tests). A from_staging job's threads demote what
  // they have read once it no longer holds anyone up, a to_staging job's
  // what they have written where it says so (see job).
  [[nodiscard]] static std::uint64_t demoted_bytes() noexcept;
  // Demotes now what this thread has read and not yet demoted (see "Demoting
  // later"), as the thread would at its next wait (for tests).
  static void demote_pending() noexcept;
  // Gates waited for (one event synchronisation each) since the process
  // started (for tests): once per chunk opened behind a gate with open, none
  // for those opened behind the chunk before them (open_behind_previous).
  [[nodiscard]] static std::uint64_t gate_waits() noexcept;

  // Pieces smaller than this are not worth a thread of their own.
  static constexpr std::size_t min_piece = std::size_t{64} << 10;
  // Pieces larger than this balance poorly between threads.
  static constexpr std::size_t max_piece = std::size_t{1} << 20;

 private:
  // A job that wants pool threads, in a slot that they look at without a
  // lock, because a lock every thread takes to join made a job's start cost a
  // microsecond or more per thread (bench/tuning/engine_tuning.cpp).
  struct alignas(64) slot {
    std::atomic<job*> current{nullptr};
    std::atomic<int> visitors{0};  // pool threads looking at or working on the slot's job
  };
  static constexpr int slot_count = 16;  // jobs at once that pool threads help with

  host_copy_pool() = default;
  void ensure_workers(int count);
  [[nodiscard]] int publish(job* j);  // the slot taken, or -1 when every slot is taken
  void withdraw(int slot);            // returns once no pool thread touches the slot's job
  void announce();                    // a job has new pieces to claim
  bool help(slot& s);                 // works on the slot's job if it wants help; true if it ran a piece
  void work();

  std::array<slot, slot_count> slots_{};
  std::mutex mutex_;  // for sleeping and growing
  std::condition_variable available_;
  std::atomic<std::size_t> epoch_{0};  // bumped whenever pieces become claimable
  std::atomic<int> sleeping_{0};
  std::atomic<int> workers_{0};  // grows under mutex_
};

// One copy between user memory and staging buffers (or straight between two
// host ranges), cut into the chunks given. The caller opens chunks in order,
// each with the buffer its bytes go through and optionally a gate, an event
// the pool threads wait for before they touch that buffer; then finishes them
// in order. A job lives on its caller's stack: destroying one that is not
// finished stops it (pieces not yet claimed are never copied) and waits until
// no pool thread touches it any more.
class host_copy_pool::job {
 public:
  enum class direction { to_staging, from_staging, host_to_host };
  struct chunk {
    std::size_t offset;
    std::size_t bytes;
  };

  // `dst` and `src` are the whole copy's ranges: for to_staging `src` is the
  // user's memory (dst unused), for from_staging `dst` is (src unused), for
  // host_to_host both. Up to `threads` threads copy, the caller included.
  // from_staging demotes the staging lines it has read (see demote), unless
  // told to keep them (keep_staging_lines).
  job(host_copy_pool& pool, direction dir, std::byte* dst, const std::byte* src, const std::vector<chunk>& chunks,
      int threads);
  ~job();
  job(const job&) = delete;
  job& operator=(const job&) = delete;

  [[nodiscard]] std::size_t chunks() const noexcept { return chunk_count_; }
  // Makes chunk `c` (the next one not yet open) claimable; its bytes go to or
  // come from `staging` (ignored for host_to_host), once `gate` (when not
  // null; it must stay recorded as it is until the chunk is finished) has
  // completed. The chunk waits for the gate's latest record even when the
  // chunk before it had the same gate: the event may have been recorded again
  // since (a ring of buffers reuses its events).
  void open(std::size_t c, std::byte* staging, const event* gate);
  // The same for a gather into staging (to_staging) or a scatter out of it
  // (from_staging) of many small ranges: the user's side of chunk `c` is
  // `user` rather than the job's range at the chunk's offset (a batch of
  // copies makes each of its ranges a chunk; see batch_execution.cpp).
  void open(std::size_t c, std::byte* staging, const event* gate, std::byte* user);
  // Opens chunk `c` (c > 0) behind the wait of chunk c - 1: the same record
  // of the same gate, waited for once for both, as a batch puts a group of
  // ranges behind one event (an event synchronisation costs microseconds).
  void open_behind_previous(std::size_t c, std::byte* staging, std::byte* user);
  // Copies pieces of chunk `c` on the caller while any are left, then waits
  // until every piece of it is done. Throws what a pool thread met (a gate's
  // error), after which the job copies nothing more.
  void finish(std::size_t c);
  // Whether chunk `c` is open and every piece of it is done (finish(c) then
  // returns at once). For the caller, like open and finish.
  [[nodiscard]] bool finished(std::size_t c) const noexcept;
  // Stops the job and waits until no pool thread touches it any more.
  void stop() noexcept;
  // How many pool threads may work on the job from now on (clamped to the
  // number it was made with, less the caller): threads beyond it leave after
  // their piece. For pacing the host copies to the link (see staging_pacer.hpp).
  void set_helpers(int helpers) noexcept;
  // How a to_staging job writes its staging (set before the first chunk is
  // opened): the chunks before `ordinary_from` with streaming stores
  // (copy_piece), the others with ordinary stores (memcpy); those from
  // `demoted_from` on are also demoted (see demote) by the thread that wrote
  // them, before it reports the piece done, so that a DMA reading them next
  // finds them in the shared cache; where the CPU cannot demote, they get
  // streaming stores instead. By default every chunk gets streaming stores.
  void set_stores(std::size_t ordinary_from, std::size_t demoted_from) noexcept {
    ordinary_from_ = ordinary_from;
    demoted_from_ = demoted_from;
  }
  // A from_staging job leaves the staging lines it has read in the cores'
  // caches instead of demoting them (later: see the top of this file); set
  // before the first chunk is opened.
  void keep_staging_lines() noexcept { demote_staging_ = false; }
  // A from_staging job writes the user's memory with ordinary stores
  // (memcpy) rather than streaming ones (copy_piece), so that it does not fill
  // memory beside the DMAs bringing the next chunks in (see
  // staging_thresholds::ordinary_download_stores_above); set before the first
  // chunk is opened.
  void copy_out_with_ordinary_stores() noexcept { ordinary_out_ = true; }
  [[nodiscard]] int helpers() const noexcept { return helpers_allowed_.load(std::memory_order_relaxed); }

 private:
  friend class host_copy_pool;
  struct piece {
    std::size_t offset;  // in the copy
    std::size_t bytes;
    std::size_t chunk;
  };
  struct chunk_state {
    chunk range{};
    std::size_t end_piece = 0;  // one past the chunk's last piece
    std::byte* staging = nullptr;
    std::byte* user = nullptr;  // the user's side of the chunk, when not the job's range
    const event* gate = nullptr;
    chunk_state* gate_owner = nullptr;  // the chunk whose gate_state this one waits on: the first behind its gate
    std::atomic<int> gate_state{gate_open};
    std::atomic<std::size_t> remaining{0};
  };
  static constexpr int gate_closed = 0;   // not waited for yet
  static constexpr int gate_waiting = 1;  // one thread waits for the event
  static constexpr int gate_open = 2;     // the event has completed (or failed)
  void open_chunk(std::size_t c, std::byte* staging, const event* gate, std::byte* user, bool shares_wait);
  bool claim(std::size_t& p, std::size_t limit) noexcept;
  void pass_gate(chunk_state& state) noexcept;
  void run(std::size_t p) noexcept;
  [[nodiscard]] bool has_work() const noexcept;
  void fail(std::exception_ptr error) noexcept;

  host_copy_pool& pool_;
  direction dir_;
  std::byte* dst_;
  const std::byte* src_;
  std::vector<piece> pieces_;
  std::unique_ptr<chunk_state[]> chunks_;
  std::size_t chunk_count_;
  int helpers_most_;                      // pool threads at most, not counting the caller
  std::atomic<int> helpers_allowed_;      // pool threads now (set_helpers), up to helpers_most_
  std::atomic<int> helpers_{0};           // pool threads working on it
  std::atomic<std::size_t> next_{0};      // the first piece not claimed
  std::atomic<std::size_t> opened_{0};    // pieces that may be claimed: those of the open chunks
  std::atomic<std::size_t> done_{0};      // pieces run (copied, or skipped after an error)
  std::atomic<std::uint32_t> signal_{0};  // bumped when a chunk completes or the job fails
  std::atomic<bool> error_taken_{false};  // one thread writes error_
  std::atomic<bool> failed_{false};       // set after error_ is written
  std::exception_ptr error_;
  std::size_t opened_chunks_ = 0;
  bool demote_staging_ = true;  // from_staging: demote what it has read
  bool ordinary_out_ = false;   // from_staging: memcpy, not copy_piece (copy_out_with_ordinary_stores)
  std::size_t ordinary_from_;   // to_staging: chunks from here memcpy, not copy_piece (set_stores)
  std::size_t demoted_from_;    // to_staging: chunks from here memcpy and demote
  int slot_ = -1;               // in the pool, while pool threads may help
  bool stopped_ = false;
};

}  // namespace syncmem::detail
