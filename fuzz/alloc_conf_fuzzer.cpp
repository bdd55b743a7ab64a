// libFuzzer target for SYNCMEM_ALLOC_CONF (mr::caching_options). Whatever the
// text, parse() either gives options or throws syncmem::logic_error; anything
// else (a crash, a sanitizer report, another exception) is a bug. Parsed
// options must survive to_string() and parse() again unchanged, the
// environment variable must read as parse() does, and a caching_resource on an
// emulated device must work with them.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <string>

#include "emulated_device.hpp"
#include "syncmem/error.hpp"
#include "syncmem/mr/caching_options.hpp"
#include "syncmem/mr/caching_resource.hpp"
#include "syncmem/stream.hpp"

namespace {

std::optional<syncmem::mr::caching_options> parse(const std::string& text, const char* source) {
  try {
    return syncmem::mr::caching_options::parse(text, source);
  } catch (const syncmem::logic_error&) {
    return std::nullopt;  // refusing is a right answer
  }
}

// A block of each kind (small, large, large enough to be oversize under a
// max_split_mb limit), its ends written and read back, then the cache emptied.
void exercise(const syncmem::mr::caching_options& options) {
  const auto device = syncmem::device_id::emulated(0);
  syncmem::mr::caching_resource resource{device, options};
  const auto s = syncmem::default_stream(device);
  for (const std::size_t bytes : {std::size_t{512}, (std::size_t{2} << 20) + 1, std::size_t{12} << 20}) {
    void* p = nullptr;
    try {
      p = resource.allocate(bytes, s);
    } catch (const std::bad_alloc&) {  // a limit below the request: out_of_memory is right
      continue;
    }
    // Both ends written and read back: the block is usable over its whole length.
    auto* b = static_cast<unsigned char*>(p);
    const std::size_t edge = std::min<std::size_t>(bytes / 2, 4096);
    std::memset(b, 0x5a, edge);
    std::memset(b + bytes - edge, 0xa5, edge);
    if (b[0] != 0x5a || b[bytes - 1] != 0xa5) std::abort();
    resource.deallocate(p, bytes, s);
  }
  resource.empty_cache();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  syncmem::fuzz::enable_one_emulated_device();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto options = parse(text, "fuzz");
  if (options) {
    const auto again = parse(options->to_string(), "to_string");
    if (!again || !(*again == *options)) std::abort();  // to_string() did not read back
    exercise(*options);
  }
  // The environment variable reads exactly as parse() does (a C string ends at the first NUL).
  if (std::memchr(data, 0, size) == nullptr) {
    ::setenv("SYNCMEM_ALLOC_CONF", text.c_str(), 1);
    std::optional<syncmem::mr::caching_options> from_env;
    try {
      from_env = syncmem::mr::caching_options::from_environment();
    } catch (const syncmem::logic_error&) {  // NOLINT(bugprone-empty-catch)
    }
    if (from_env.has_value() != options.has_value()) std::abort();
    if (from_env && !(*from_env == *options)) std::abort();
  }
  return 0;
}
