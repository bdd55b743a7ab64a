// The other process of ipc_test: reads one command per line on stdin and
// answers each with one line on stdout, so that the test decides every step.
//
//   import <hex>          import on the default stream of the handle's device: "ok" or "error <why>"
//   pending               "1" while the import stream has not reached the exporter's signal, else "0"
//   checksum              the imported bytes' FNV-1a hash, in hex
//   fill <seed>           writes random bytes of `seed` (test_support's byte stream) over them: "ok"
//   close                 closes the imported memory: "ok"
//   export <kind> <index> <bytes> <seed>   a buffer of random bytes of `seed`, exported: its handle's hex
//   exit                  exits at once, closing nothing

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ipc_bytes.hpp"
#include "syncmem/copy.hpp"
#include "syncmem/device_buffer.hpp"
#include "syncmem/ipc.hpp"
#include "syncmem/stream.hpp"

namespace {

using syncmem::test::fnv1a;
using syncmem::test::seeded_bytes;

void reply(const std::string& line) {
  std::cout << line << std::endl;  // flushed: the test waits for it
}

}  // namespace

int main() {
  std::optional<syncmem::ipc::imported_memory> imported;
  std::optional<syncmem::stream_view> stream;
  std::vector<std::shared_ptr<syncmem::device_buffer>> exported;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in{line};
    std::string command;
    in >> command;
    try {
      if (command == "import") {
        std::string hex;
        in >> hex;
        const auto h = syncmem::ipc::memory_handle::from_hex(hex);
        stream = syncmem::default_stream(h.device());
        imported = syncmem::ipc::import_memory(h, *stream);
        reply("ok");
      } else if (command == "pending") {
        reply(stream->ready() ? "0" : "1");
      } else if (command == "checksum") {
        std::vector<std::uint8_t> bytes(imported->size());
        syncmem::copy(bytes.data(), imported->data(), bytes.size(), *stream);
        stream->synchronize();
        reply(fnv1a(bytes));
      } else if (command == "fill") {
        std::uint64_t seed = 0;
        in >> seed;
        const auto bytes = seeded_bytes(seed, imported->size());
        syncmem::copy(imported->data(), bytes.data(), bytes.size(), *stream);
        stream->synchronize();
        reply("ok");
      } else if (command == "close") {
        imported.reset();
        reply("ok");
      } else if (command == "export") {
        std::string kind;
        int index = 0;
        std::size_t size = 0;
        std::uint64_t seed = 0;
        in >> kind >> index >> size >> seed;
        const auto device = kind == "cuda" ? syncmem::device_id::cuda(index) : syncmem::device_id::emulated(index);
        const auto s = syncmem::default_stream(device);
        const auto bytes = seeded_bytes(seed, size);
        auto buffer = std::make_shared<syncmem::device_buffer>(bytes.data(), size, s);
        const auto h = syncmem::ipc::export_memory(buffer->data(), size, s, buffer);
        s.synchronize();
        exported.push_back(buffer);
        reply(h.to_hex());
      } else if (command == "exit") {
        std::fflush(stdout);
        std::_Exit(0);
      } else {
        reply("error unknown command " + command);
      }
    } catch (const std::exception& e) {
      std::string what = e.what();
      for (auto& c : what) {
        if (c == '\n') c = ' ';
      }
      reply("error " + what);
    }
  }
  return 0;
}
