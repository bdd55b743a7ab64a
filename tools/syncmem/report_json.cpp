#include "report_json.hpp"

#include <fmt/format.h>

#include "json_input.hpp"

namespace syncmem::tool {

nlohmann::ordered_json to_json(const bench_results& results) {
  // Ordered, so that the file reads from the top: format, date, machine, runs.
  auto ordered = [](const nlohmann::json& j) {
    return j.is_null() ? nlohmann::ordered_json::object() : nlohmann::ordered_json::parse(j.dump());
  };
  nlohmann::ordered_json out;
  out["format"] = bench_format;
  out["date"] = results.date;
  out["duration_s"] = results.duration_s;
  out["quick"] = results.quick;
  out["rounds"] = results.rounds;
  out["filter"] = results.filter;
  out["gpu"] = results.gpu;
  out["devices"] = results.devices;
  out["machine"] = ordered(results.machine);
  out["context"] = ordered(results.context);
  out["runs"] = nlohmann::ordered_json::array();
  for (const auto& r : results.runs) {
    nlohmann::ordered_json j;
    j["name"] = r.name;
    j["suite"] = r.suite;
    j["case"] = r.case_name;
    j["method"] = r.method;
    j["parameter"] = r.parameter;
    if (r.bytes) j["bytes"] = *r.bytes;
    j["ours"] = r.ours;
    j["iterations"] = r.iterations;
    j["threads"] = r.threads;
    j["real_time_ns"] = r.real_time_ns;
    j["cpu_time_ns"] = r.cpu_time_ns;
    if (r.bytes_per_second) j["bytes_per_second"] = *r.bytes_per_second;
    if (r.items_per_second) j["items_per_second"] = *r.items_per_second;
    j["counters"] = nlohmann::ordered_json::object();
    for (const auto& [name, value] : r.counters) j["counters"][name] = value;
    if (!r.label.empty()) j["label"] = r.label;
    if (!r.error.empty()) j["error"] = r.error;
    out["runs"].push_back(std::move(j));
  }
  return out;
}

namespace {

bench_run run_from_json(const json_at& j) {
  j.expect_object();
  bench_run r;
  r.name = j.at("name").string();
  if (r.name.empty()) j.at("name").fail("the name is empty");
  const bench_name parts = parse_bench_name(r.name);
  r.suite = j.has("suite") ? j.at("suite").string() : parts.suite;
  r.case_name = j.has("case") ? j.at("case").string() : parts.case_name;
  r.method = j.has("method") ? j.at("method").string() : parts.method;
  r.parameter = j.has("parameter") ? j.at("parameter").string() : parts.parameter;
  r.bytes = j.has("bytes") ? std::optional{j.at("bytes").unsigned_integer()} : parse_size(r.parameter);
  // Results saved before modes of ours counted as ours say "ours": false for them.
  r.ours = is_our_method(r.method) || (j.has("ours") && j.at("ours").boolean());
  r.iterations = j.at("iterations").integer();
  if (r.iterations < 0) j.at("iterations").fail("a count of iterations cannot be negative");
  r.threads = j.has("threads") ? j.at("threads").integer() : 1;
  r.real_time_ns = j.at("real_time_ns").number();
  r.cpu_time_ns = j.has("cpu_time_ns") ? j.at("cpu_time_ns").number() : 0.0;
  if (r.real_time_ns < 0) j.at("real_time_ns").fail("a time cannot be negative");
  if (j.has("bytes_per_second")) r.bytes_per_second = j.at("bytes_per_second").number();
  if (j.has("items_per_second")) r.items_per_second = j.at("items_per_second").number();
  if (j.has("counters")) {
    const json_at counters = j.at("counters");
    counters.expect_object();
    for (const auto& [name, value] : counters.value().items()) r.counters[name] = counters.at(name).number();
  }
  if (j.has("label")) r.label = j.at("label").string();
  if (j.has("error")) r.error = j.at("error").string();
  return r;
}

}  // namespace

bench_results results_from_json(const nlohmann::json& document, const std::string& source) {
  const json_at root{document, source, ""};
  if (!document.is_object())
    root.fail(fmt::format("not syncmem bench results: expected an object with \"format\": \"{}\"", bench_format));
  if (!document.contains("format")) {
    root.fail(fmt::format("not syncmem bench results: there is no \"format\" field (expected \"{}\")", bench_format));
  }
  const std::string format = root.at("format").string();
  if (format != bench_format) {
    root.fail(fmt::format("unknown format \"{}\": this syncmem reads \"{}\" (`syncmem bench --json` writes it)", format,
                          bench_format));
  }
  bench_results out;
  out.date = root.has("date") ? root.at("date").string() : std::string{};
  out.duration_s = root.has("duration_s") ? root.at("duration_s").number() : 0.0;
  out.quick = root.has("quick") && root.at("quick").boolean();
  if (root.has("rounds")) {  // results written before --rounds existed ran once
    const std::int64_t rounds = root.at("rounds").integer();
    if (rounds < 1 || rounds > 1000) root.at("rounds").fail("a count of rounds must lie in [1, 1000]");
    out.rounds = static_cast<int>(rounds);
  }
  out.filter = root.has("filter") ? root.at("filter").string() : std::string{};
  out.gpu = root.at("gpu").boolean();
  if (root.has("devices")) {
    const json_at devices = root.at("devices");
    for (std::size_t i = 0; i < devices.size(); ++i) out.devices.push_back(devices.at(i).string());
  }
  if (root.has("machine")) {
    root.at("machine").expect_object();
    out.machine = document["machine"];
  }
  if (root.has("context")) {
    root.at("context").expect_object();
    out.context = document["context"];
  }
  const json_at runs = root.at("runs");
  for (std::size_t i = 0; i < runs.size(); ++i) out.runs.push_back(run_from_json(runs.at(i)));
  return out;
}

}  // namespace syncmem::tool
