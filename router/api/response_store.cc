// ResponseStore (router/api/responses.h) and the input items' pages.
#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "router/api/json_fields.h"
#include "router/api/responses.h"
#include "router/api/shapes.h"

namespace tandem::router {
namespace {

// What an entry costs beyond its texts: the list node, the map's, the strings' own.
constexpr size_t kEntryOverheadBytes = 256;

}  // namespace

void ResponseStore::Put(const std::string& id, StoredResponse response) {
  // The parsed JSON takes a few times its text: counted as three times, with the body's text.
  response.bytes = kEntryOverheadBytes + 2 * id.size() + response.body.size() +
                   3 * (api_internal::Dump(response.conversation).size() +
                        api_internal::Dump(response.input_items).size());
  if (response.bytes > max_bytes_) {
    Delete(id);  // an older entry of that id would now answer for the wrong response
    return;
  }
  auto shared = std::make_shared<const StoredResponse>(std::move(response));
  absl::MutexLock lock(&mu_);
  if (auto it = by_id_.find(id); it != by_id_.end()) {
    bytes_ -= it->second->response->bytes;
    lru_.erase(it->second);
    by_id_.erase(it);
  }
  bytes_ += shared->bytes;
  lru_.push_front(Entry{id, std::move(shared)});
  by_id_[id] = lru_.begin();
  EvictLocked();
}

std::shared_ptr<const StoredResponse> ResponseStore::Get(const std::string& id) {
  absl::MutexLock lock(&mu_);
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->response;
}

bool ResponseStore::Delete(const std::string& id) {
  std::shared_ptr<const StoredResponse> gone;  // freed outside the lock
  absl::MutexLock lock(&mu_);
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) return false;
  gone = std::move(it->second->response);
  bytes_ -= gone->bytes;
  lru_.erase(it->second);
  by_id_.erase(it);
  return true;
}

void ResponseStore::EvictLocked() {
  while (bytes_ > max_bytes_ && !lru_.empty()) {
    const Entry& last = lru_.back();
    bytes_ -= last.response->bytes;
    by_id_.erase(last.id);
    lru_.pop_back();
  }
}

size_t ResponseStore::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

size_t ResponseStore::size() const {
  absl::MutexLock lock(&mu_);
  return lru_.size();
}

absl::StatusOr<std::string> InputItemsPage(const nlohmann::json& items, std::string_view order,
                                           std::string_view after, std::string_view limit_text) {
  using api_internal::Excerpt;
  int limit = 20;
  if (!limit_text.empty() &&
      (!absl::SimpleAtoi(absl::string_view(limit_text.data(), limit_text.size()), &limit) ||
       limit < 1 || limit > 100)) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit must be an integer from 1 to 100, got '", Excerpt(limit_text), "'"));
  }
  if (!order.empty() && order != "asc" && order != "desc") {
    return absl::InvalidArgumentError(
        absl::StrCat("order must be \"asc\" or \"desc\", got '", Excerpt(order), "'"));
  }
  std::vector<const nlohmann::json*> listed;
  if (items.is_array()) {
    for (const nlohmann::json& item : items) listed.push_back(&item);
  }
  if (order != "asc") std::reverse(listed.begin(), listed.end());
  size_t first = 0;
  if (!after.empty()) {
    const auto it = std::find_if(listed.begin(), listed.end(), [&](const nlohmann::json* item) {
      return item->value("id", "") == after;
    });
    if (it == listed.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("after '", Excerpt(after), "' is not an item of this response's input"));
    }
    first = static_cast<size_t>(it - listed.begin()) + 1;
  }
  const size_t end = std::min(listed.size(), first + static_cast<size_t>(limit));
  nlohmann::json data = nlohmann::json::array();
  for (size_t i = first; i < end; ++i) data.push_back(*listed[i]);
  nlohmann::json page = {{"object", "list"},
                         {"data", data},
                         {"first_id", data.empty() ? nlohmann::json() : data.front()["id"]},
                         {"last_id", data.empty() ? nlohmann::json() : data.back()["id"]},
                         {"has_more", end < listed.size()}};
  return api_internal::Dump(page);
}

}  // namespace tandem::router
