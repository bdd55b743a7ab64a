// `syncmem bench` in a build without the suites (SYNCMEM_BUILD_BENCH=OFF):
// saved results can still be drawn (--from), nothing can be measured.

#include "bench_runner.hpp"
#include "files.hpp"

namespace syncmem::tool {
namespace {

[[noreturn]] void unavailable() {
  throw input_error{
      "this syncmem was built without the benchmark suites (SYNCMEM_BUILD_BENCH=OFF): rebuild with "
      "-DSYNCMEM_BUILD_BENCH=ON to measure, or draw saved results with --from FILE"};
}

}  // namespace

bool benchmarks_built() noexcept { return false; }
std::vector<std::string> list_benchmarks(const bench_request&) { unavailable(); }
bench_results run_benchmarks(const bench_request&, const std::function<void(const bench_results&)>&) { unavailable(); }

}  // namespace syncmem::tool
