// RouterServer's routes for the Responses API's stored responses (router/api/responses.h):
// GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items and
// POST /v1/responses/{id}/cancel, behind the client API key as POST /v1/responses is.
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "router/api/json_fields.h"
#include "router/api/response.h"
#include "router/api/responses.h"
#include "router/router_server.h"

namespace tandem::router {
namespace {

constexpr std::string_view kResponsesPrefix = "/v1/responses/";

// The {id} segment of /v1/responses/{id}[/...].
std::string ResponseIdOf(const std::string& path) {
  std::string_view rest = std::string_view(path).substr(kResponsesPrefix.size());
  return std::string(rest.substr(0, rest.find('/')));
}

HttpResponse NotFound(const std::string& id) {
  return ErrorResponse(absl::NotFoundError(absl::StrCat(
      "no stored response has the id '", api_internal::Excerpt(id),
      "': it was not stored (store: false, or its answer failed or was left unfinished), was "
      "deleted, or was dropped from this router's store (--response-store-mb)")));
}

}  // namespace

void RouterServer::AddResponsesRoutes(const std::string* api_key) {
  const std::string one = "/v1/responses/{id}";
  HandleGuarded("GET", one, api_key, "API key", [this, one](HttpRequest q, HttpResponder r) {
    const std::string id = ResponseIdOf(q.path);
    // Any spelling of false passes (Python's requests sends "False").
    if (!absl::EqualsIgnoreCase(q.Query("stream").value_or("false"), "false")) {
      Answer(one, r,
             ErrorResponse(absl::InvalidArgumentError(
                 "stream is not supported when retrieving a response: it has already finished; "
                 "retrieve it without stream")));
      return;
    }
    std::shared_ptr<const StoredResponse> stored = response_store_->Get(id);
    Answer(one, r, stored != nullptr ? HttpResponse::Json(200, stored->body) : NotFound(id));
  });
  HandleGuarded("DELETE", one, api_key, "API key", [this, one](HttpRequest q, HttpResponder r) {
    const std::string id = ResponseIdOf(q.path);
    if (!response_store_->Delete(id)) {
      Answer(one, r, NotFound(id));
      return;
    }
    const nlohmann::json deleted = {{"id", id}, {"object", "response"}, {"deleted", true}};
    Answer(one, r, HttpResponse::Json(200, deleted.dump()));
  });
  const std::string items = "/v1/responses/{id}/input_items";
  HandleGuarded("GET", items, api_key, "API key", [this, items](HttpRequest q, HttpResponder r) {
    const std::string id = ResponseIdOf(q.path);
    std::shared_ptr<const StoredResponse> stored = response_store_->Get(id);
    if (stored == nullptr) {
      Answer(items, r, NotFound(id));
      return;
    }
    absl::StatusOr<std::string> page =
        InputItemsPage(stored->input_items, q.Query("order").value_or(""),
                       q.Query("after").value_or(""), q.Query("limit").value_or(""));
    Answer(items, r,
           page.ok() ? HttpResponse::Json(200, *std::move(page)) : ErrorResponse(page.status()));
  });
  const std::string cancel = "/v1/responses/{id}/cancel";
  HandleGuarded("POST", cancel, api_key, "API key", [this, cancel](HttpRequest q, HttpResponder r) {
    const std::string id = ResponseIdOf(q.path);
    if (response_store_->Get(id) == nullptr) {
      Answer(cancel, r, NotFound(id));
      return;
    }
    Answer(cancel, r,
           ErrorResponse(absl::InvalidArgumentError(
               "only background responses can be cancelled; this one has finished (an answer in "
               "progress ends when its client disconnects, or with POST /abort_request)")));
  });
}

void RouterServer::StoreResponse(const ResponseShaper& shaper) {
  std::optional<StoredResponse> entry = shaper.ToStore();
  if (entry) response_store_->Put(shaper.response_id(), *std::move(entry));
}

}  // namespace tandem::router
