// syncmem::ipc: the handle's format, export and import over the backend's
// ipc_capability, the control page and the export registry.

#include "syncmem/ipc.hpp"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "core/ignored_failure.hpp"
#include "core/reclaimers.hpp"
#include "ipc/control_page.hpp"
#include "ipc/export_registry.hpp"
#include "ipc/fd_broker.hpp"
#include "syncmem/device_guard.hpp"
#include "syncmem/error.hpp"
#include "syncmem/synced_memory.hpp"

namespace syncmem::ipc {

namespace {

using syncmem::detail::backend;
using syncmem::detail::ipc_bytes;
using syncmem::detail::ipc_capability;
using syncmem::detail::ipc::control_page;
using syncmem::detail::ipc::export_record;
using syncmem::detail::ipc::export_registry;
using syncmem::detail::ipc::export_state;

constexpr std::uint32_t handle_magic = 0x50494d53;  // "SMIP"
constexpr std::uint16_t handle_version = 1;

// A memory_handle's bytes.
struct wire_handle {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint8_t kind;
  std::uint8_t unused;
  std::int32_t device_index;
  std::int32_t exporter;
  std::int32_t control_fd;
  std::uint32_t unused2;
  std::uint64_t control_inode;
  std::uint64_t control_device;
  std::uint64_t nonce;
  std::uint64_t allocation_size;
  std::uint64_t offset;
  std::uint64_t size;
  ipc_bytes memory;
  ipc_bytes event;
};
static_assert(sizeof(wire_handle) <= memory_handle::size_in_bytes);

std::uint64_t random_nonce() {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  return random();
}

ipc_capability& capability(device_id device) {
  ipc_capability* c = syncmem::detail::backend_for(device).ipc();
  if (c == nullptr) {
    SYNCMEM_FAIL_AS(unsupported_error, fmt::format("ipc: {} cannot share memory between processes", to_string(device)));
  }
  return *c;
}

}  // namespace

struct handle_access {
  static wire_handle read(const memory_handle& h) {
    wire_handle w{};
    std::memcpy(&w, h.bytes_.data(), sizeof w);
    return w;
  }
  static memory_handle make(const wire_handle& w) {
    memory_handle h;
    std::memcpy(h.bytes_.data(), &w, sizeof w);
    return h;
  }
};

namespace {

wire_handle checked(const memory_handle& h) {
  SYNCMEM_EXPECTS(!h.empty(), "ipc: the handle is empty");
  return handle_access::read(h);
}

}  // namespace

// ---- memory_handle -----------------------------------------------------------

memory_handle memory_handle::from_bytes(std::span<const std::byte> bytes) {
  SYNCMEM_EXPECTS(bytes.size() == size_in_bytes,
                  fmt::format("ipc: a handle has {} bytes, not {}", size_in_bytes, bytes.size()));
  memory_handle h;
  std::memcpy(h.bytes_.data(), bytes.data(), size_in_bytes);
  const wire_handle w = handle_access::read(h);
  SYNCMEM_EXPECTS(w.magic == handle_magic, "ipc: the bytes are not a syncmem IPC handle");
  SYNCMEM_EXPECTS(
      w.version == handle_version,
      fmt::format("ipc: the handle is of format {}; this syncmem reads format {}", w.version, handle_version));
  SYNCMEM_EXPECTS(w.kind == static_cast<std::uint8_t>(device_kind::cuda) ||
                      w.kind == static_cast<std::uint8_t>(device_kind::emulated),
                  "ipc: the handle names no known kind of device (forged or damaged)");
  return h;
}

memory_handle memory_handle::from_hex(std::string_view hex) {
  SYNCMEM_EXPECTS(hex.size() == 2 * size_in_bytes,
                  fmt::format("ipc: a handle in hex has {} digits, not {}", 2 * size_in_bytes, hex.size()));
  std::array<std::byte, size_in_bytes> bytes{};
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < size_in_bytes; ++i) {
    const int high = digit(hex[2 * i]);
    const int low = digit(hex[2 * i + 1]);
    SYNCMEM_EXPECTS(high >= 0 && low >= 0, "ipc: the handle's text is not hexadecimal");
    bytes[i] = static_cast<std::byte>(high * 16 + low);
  }
  return from_bytes(bytes);
}

std::string memory_handle::to_hex() const {
  std::string out;
  out.reserve(2 * size_in_bytes);
  for (const std::byte b : bytes_) out += fmt::format("{:02x}", static_cast<unsigned>(b));
  return out;
}

bool memory_handle::empty() const noexcept { return handle_access::read(*this).magic != handle_magic; }

device_id memory_handle::device() const {
  const wire_handle w = checked(*this);
  return w.kind == static_cast<std::uint8_t>(device_kind::cuda) ? device_id::cuda(w.device_index)
                                                                : device_id::emulated(w.device_index);
}

std::size_t memory_handle::size() const { return checked(*this).size; }
int memory_handle::exporter() const { return checked(*this).exporter; }

// ---- export ------------------------------------------------------------------

memory_handle export_memory(const void* p, std::size_t bytes, stream_view s, std::shared_ptr<const void> owner) {
  SYNCMEM_EXPECTS(p != nullptr && bytes > 0, "ipc export: the range is empty");
  // An allocation about to fail for lack of memory collects too.
  static std::once_flag reclaims;
  std::call_once(reclaims, [] { syncmem::detail::add_reclaimer([] { return collect(); }); });
  collect();
  const device_id device = s.device();
  ipc_capability& c = capability(device);
  device_guard guard{device};
  syncmem::detail::ipc_export shared = c.export_memory(device.index(), p, bytes);
  const auto offset =
      static_cast<std::size_t>(static_cast<const std::byte*>(p) - static_cast<const std::byte*>(shared.base));
  SYNCMEM_EXPECTS(offset + bytes <= shared.size,
                  fmt::format("ipc export: [{}, +{}) runs past the end of its allocation of {} bytes at {}", p, bytes,
                              shared.size, shared.base));
  const std::uint64_t nonce = random_nonce();
  auto page = control_page::create(nonce, shared.extra);
  wire_handle w{};
  w.magic = handle_magic;
  w.version = handle_version;
  w.kind = static_cast<std::uint8_t>(device.kind());
  w.device_index = device.index();
  w.exporter = static_cast<std::int32_t>(::getpid());
  w.control_fd = page->fd();
  w.control_inode = page->inode();
  w.control_device = page->device();
  w.nonce = nonce;
  w.allocation_size = shared.size;
  w.offset = offset;
  w.size = bytes;
  w.memory = shared.memory;
  const event_handle signal = c.record_signal(device.index(), s.handle(), control_page::word(page), w.event);
  std::vector<int> named = std::move(shared.named);
  named.push_back(page->fd());
  export_registry::instance().add(export_record{std::move(page), std::move(owner), device, signal, const_cast<void*>(p),
                                                bytes, std::move(named), std::move(shared.held)});
  syncmem::detail::ipc::start_fd_broker();
  return handle_access::make(w);
}

// ---- import ------------------------------------------------------------------

namespace detail {
struct import_state {
  import_state(device_id d, stream_view s) noexcept : device{d}, stream{s} {}
  import_state(const import_state&) = delete;
  import_state& operator=(const import_state&) = delete;

  std::shared_ptr<control_page> page;  // null until this import holds the export
  device_id device;
  stream_view stream;
  void* base = nullptr;  // the mapping; null for an import by the exporting process
  std::size_t allocation_size = 0;
  void* data = nullptr;
  std::size_t size = 0;

  ~import_state() {
    if (page == nullptr) return;
    syncmem::detail::ignore_failure("waiting for the stream of imported memory", [&] { stream.synchronize(); });
    if (base != nullptr) {
      syncmem::detail::ignore_failure("unmapping imported memory", [&] {
        device_guard guard{device};
        syncmem::detail::backend_for(device).ipc()->close_memory(device.index(), base, allocation_size);
      });
    }
    page->data().state.store(static_cast<std::uint32_t>(export_state::closed), std::memory_order_release);
  }
};
}  // namespace detail

imported_memory import_memory(const memory_handle& h, stream_view s) {
  const wire_handle w = checked(h);
  const device_id device = h.device();
  SYNCMEM_EXPECTS(device == s.device(),
                  fmt::format("ipc import: the handle shares memory of {}, and the stream is on {}", to_string(device),
                              to_string(s.device())));
  ipc_capability& c = capability(device);
  auto state = std::make_shared<detail::import_state>(device, s);
  state->size = w.size;
  device_guard guard{device};
  std::shared_ptr<control_page> page;
  std::optional<export_record> own;
  if (w.exporter == static_cast<std::int32_t>(::getpid())) {
    // An import by the exporting process: the memory is its own already.
    own = export_registry::instance().find(w.nonce);
    SYNCMEM_EXPECTS(own.has_value(),
                    "ipc import: this process exported no such memory, or it was imported and closed already");
    page = own->page;
  } else {
    page = control_page::open(w.exporter, w.control_fd, w.control_inode, w.control_device, w.nonce);
  }
  auto& control = page->data();
  auto expected = static_cast<std::uint32_t>(export_state::exported);
  if (!control.state.compare_exchange_strong(expected, static_cast<std::uint32_t>(export_state::imported),
                                             std::memory_order_acq_rel)) {
    SYNCMEM_FAIL(expected == static_cast<std::uint32_t>(export_state::imported)
                     ? fmt::format("ipc import: the handle was imported already (by process {}); each handle is "
                                   "imported once",
                                   control.importer.load(std::memory_order_acquire))
                     : std::string{"ipc import: the handle was imported and closed already"});
  }
  control.importer.store(static_cast<std::int32_t>(::getpid()), std::memory_order_release);
  // From here the import holds the export: if what follows throws, the
  // state's destructor closes it, and the exporter gets the memory back.
  state->page = std::move(page);
  if (own) {
    state->data = own->data;
    if (own->signal != event_handle{}) {
      syncmem::detail::backend_for(device).stream_wait_event(device.index(), s.handle(), own->signal);
    } else {
      c.wait_signal(device.index(), s.handle(), w.event, control_page::word(state->page), w.exporter);
    }
  } else {
    state->base = c.open_memory(device.index(), w.memory, state->page->extra(), w.allocation_size, w.exporter);
    state->allocation_size = w.allocation_size;
    state->data = static_cast<std::byte*>(state->base) + w.offset;
    c.wait_signal(device.index(), s.handle(), w.event, control_page::word(state->page), w.exporter);
  }
  return imported_memory{std::move(state)};
}

imported_memory& imported_memory::operator=(imported_memory&& other) noexcept {
  if (this != &other) {
    close();
    state_ = std::move(other.state_);
  }
  return *this;
}

void* imported_memory::data() const noexcept { return state_ ? state_->data : nullptr; }
std::size_t imported_memory::size() const noexcept { return state_ ? state_->size : 0; }
device_id imported_memory::device() const {
  SYNCMEM_EXPECTS(state_ != nullptr, "ipc: the imported memory is closed");
  return state_->device;
}
void imported_memory::close() noexcept { state_.reset(); }

// ---- synced_memory -----------------------------------------------------------

memory_handle export_synced(const std::shared_ptr<synced_memory>& memory, stream_view s) {
  SYNCMEM_EXPECTS(memory != nullptr && memory->size() > 0, "ipc export: the synced_memory is null or empty");
  void* p = memory->mutable_device_data(s);
  return export_memory(p, memory->size(), s, memory);
}

std::shared_ptr<synced_memory> import_synced(const memory_handle& h, stream_view s) {
  auto memory = std::make_shared<imported_memory>(import_memory(h, s));
  auto synced = std::make_shared<synced_memory>(memory->size(), memory->device());
  synced->borrow_device(memory->data(), memory->size(), memory);
  return synced;
}

// ---- the exporter's records --------------------------------------------------

std::size_t collect() { return export_registry::instance().collect(); }
std::size_t exports_held() { return export_registry::instance().held(); }

}  // namespace syncmem::ipc
