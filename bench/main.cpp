// Runs every suite with Google Benchmark's own reporting. --quick runs fewer
// sizes; any Google Benchmark flag (--benchmark_filter=...) works too.

#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "bench.hpp"

int main(int argc, char** argv) {
  bool quick = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 2;
  syncmem::bench::register_all(syncmem::bench::default_options(quick));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
