#pragma once

// bench_results as JSON (`syncmem bench --json`) and back (`--from`). The
// format is "syncmem.bench/1":
//
//   {"format": "syncmem.bench/1", "date": "...Z", "duration_s": 12.5,
//    "quick": false, "filter": ".", "gpu": true, "devices": ["cuda:0"],
//    "machine": {...syncmem info --json...}, "context": {...},
//    "runs": [{"name": "transfer/h2d/engine/64MiB", "suite": "transfer",
//              "case": "h2d", "method": "engine", "parameter": "64MiB",
//              "bytes": 67108864, "ours": true, "iterations": 100,
//              "threads": 1, "real_time_ns": 1.2e6, "cpu_time_ns": 3.0e4,
//              "bytes_per_second": 5.4e10, "counters": {}}, ...]}
//
// Optional run fields (bytes, bytes_per_second, items_per_second, label,
// error) are left out when they have no value.

#include <string>

#include <nlohmann/json.hpp>

#include "bench_results.hpp"

namespace syncmem::tool {

inline constexpr const char* bench_format = "syncmem.bench/1";

[[nodiscard]] nlohmann::ordered_json to_json(const bench_results& results);

// Reads results that to_json wrote; `source` names the file in messages.
// Throws input_error saying where and what is wrong.
[[nodiscard]] bench_results results_from_json(const nlohmann::json& document, const std::string& source);

}  // namespace syncmem::tool
