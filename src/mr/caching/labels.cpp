#include "mr/caching/labels.hpp"

#include <mutex>
#include <unordered_map>
#include <vector>

namespace syncmem::mr::detail::caching {

namespace {

struct label_table {
  std::mutex mutex;
  std::unordered_map<std::string, std::uint32_t> ids;
  std::vector<std::string> texts{std::string{}, std::string{"(more distinct labels than syncmem keeps)"}};
};

label_table& labels() {
  static auto* const table = new label_table{};  // never destroyed: resources may outlive main()
  return *table;
}

thread_local std::string tls_label_text;
thread_local std::uint32_t tls_label_id = no_label;

}  // namespace

std::uint32_t intern_label(std::string_view text) {
  auto& t = labels();
  std::lock_guard lock{t.mutex};
  std::string key{text};
  if (auto it = t.ids.find(key); it != t.ids.end()) return it->second;
  if (t.texts.size() >= max_labels) return overflow_label;
  const auto id = static_cast<std::uint32_t>(t.texts.size());
  t.texts.push_back(key);
  t.ids.emplace(std::move(key), id);
  return id;
}

std::string label_text(std::uint32_t id) {
  auto& t = labels();
  std::lock_guard lock{t.mutex};
  return id < t.texts.size() ? t.texts[id] : std::string{};
}

std::uint32_t label_id_of(std::string_view label) {
  if (label != tls_label_text) {
    tls_label_id = intern_label(label);
    tls_label_text.assign(label);
  }
  return tls_label_id;
}

}  // namespace syncmem::mr::detail::caching
