#pragma once

// The page an exporter and its importer share for one export: which state
// the export is in, who imported it, the word the exporter's stream signals
// through, and after it any longer description of the memory the backend
// gave. A memfd, which the importer opens through /proc/<exporter>/fd/<fd>.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

#include "backend/ipc_capability.hpp"

namespace syncmem::detail::ipc {

enum class export_state : std::uint32_t { exported = 0, imported = 1, closed = 2 };

struct control_data {
  std::uint64_t magic;
  std::uint64_t nonce;  // random, also in the handle: a handle of another export does not match
  std::atomic<std::uint32_t> state;
  std::atomic<std::int32_t> importer;
  ipc_shared_word word;
  std::uint64_t extra_size;  // the backend's longer description, on the pages after this one
};

class control_page {
 public:
  // A new page for an export, in the state `exported`, followed by `extra`.
  [[nodiscard]] static std::shared_ptr<control_page> create(std::uint64_t nonce, std::span<const std::byte> extra);
  // The page of process `exporter`'s file descriptor `fd`; throws
  // syncmem::logic_error when that process no longer has it (it exited, or the
  // export was released) or the handle does not match it.
  [[nodiscard]] static std::shared_ptr<control_page> open(pid_t exporter, int fd, std::uint64_t inode,
                                                          std::uint64_t device, std::uint64_t nonce);

  control_page(const control_page&) = delete;
  control_page& operator=(const control_page&) = delete;
  ~control_page();

  [[nodiscard]] control_data& data() const noexcept { return *data_; }
  // The backend's longer description of the memory (empty for most).
  [[nodiscard]] std::span<const std::byte> extra() const noexcept;
  // The exporter's descriptor and the file's identity, for the handle.
  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] std::uint64_t inode() const noexcept { return inode_; }
  [[nodiscard]] std::uint64_t device() const noexcept { return device_; }
  // The shared word, kept mapped by the pointer.
  [[nodiscard]] static std::shared_ptr<ipc_shared_word> word(const std::shared_ptr<control_page>& page) {
    return {page, &page->data_->word};
  }

 private:
  control_page(control_data* data, std::size_t mapped, int fd, std::uint64_t inode, std::uint64_t device) noexcept
      : data_{data}, mapped_{mapped}, fd_{fd}, inode_{inode}, device_{device} {}

  control_data* data_;
  std::size_t mapped_;  // bytes of the file mapped at data_
  int fd_;              // -1 in the importer, which keeps only the mapping
  std::uint64_t inode_;
  std::uint64_t device_;
};

}  // namespace syncmem::detail::ipc
