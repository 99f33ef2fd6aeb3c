// ParseBatch: a body with several prompts and/or n choices per prompt becomes one RoutedRequest
// per choice. Each prompt is parsed by the one-prompt parser (request.cc) on a copy of the body
// that holds only that prompt and its share of the per-prompt lists, so every check the
// one-prompt path makes holds for each item of a batch too.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "router/api/json_fields.h"
#include "router/api/request.h"
#include "router/api/request_common.h"

namespace tandem::router {
namespace {

using api_internal::Find;
using api_internal::Json;
using api_internal::JsonTypeName;

// /generate fields SGLang accepts as one value per prompt of a batch.
constexpr const char* kGeneratePerPromptKeys[] = {"sampling_params",  "rid",
                                                  "return_logprob",   "logprob_start_len",
                                                  "top_logprobs_num", "return_text_in_logprobs"};

// The prompts of a body that lists several: the key they are under and each one. Empty when the
// body holds one prompt (left to the one-prompt parser as it is).
struct PromptList {
  std::string key;
  std::vector<const Json*> prompts;
};

PromptList ListedPrompts(ApiKind kind, const Json& body) {
  PromptList list;
  auto take = [&](const char* key, const Json& value) {
    list.key = key;
    for (const Json& prompt : value) list.prompts.push_back(&prompt);
  };
  if (kind == ApiKind::kGenerate) {
    // text: a list of strings; input_ids: a list of lists of ids.
    if (const Json* text = Find(body, "text"); text != nullptr && text->is_array()) {
      take("text", *text);
    } else if (const Json* ids = Find(body, "input_ids");
               ids != nullptr && ids->is_array() && !ids->empty() && (*ids)[0].is_array()) {
      take("input_ids", *ids);
    }
  } else if (kind == ApiKind::kCompletions) {
    // prompt: a list of strings or of lists of ids (a flat list of ids is one prompt).
    if (const Json* prompt = Find(body, "prompt");
        prompt != nullptr && prompt->is_array() && !prompt->empty() &&
        ((*prompt)[0].is_string() || (*prompt)[0].is_array())) {
      take("prompt", *prompt);
    }
  }
  return list;
}

absl::StatusOr<int> ReadN(const Json& value, const std::string& path) {
  ASSIGN_OR_RETURN(const int64_t n, api_internal::ToInt(value, path, 1, kMaxBatchChoices));
  return static_cast<int>(n);
}

// OpenAI's n and completions' best_of, removed from `body` (the one-prompt parser refuses them).
absl::StatusOr<int> TakeOpenAiN(ApiKind kind, Json* body) {
  int n = 1;
  if (const Json* v = Find(*body, "n"); v != nullptr) {
    ASSIGN_OR_RETURN(n, ReadN(*v, "n"));
  }
  body->erase("n");
  if (kind != ApiKind::kCompletions) return n;
  if (const Json* v = Find(*body, "best_of"); v != nullptr) {
    ASSIGN_OR_RETURN(const int64_t best_of,
                     api_internal::ToInt(*v, "best_of", 1, int64_t{kMaxBatchChoices}));
    if (best_of < n) {
      return absl::InvalidArgumentError(
          absl::StrCat("best_of must be at least n (", n, "), got ", best_of));
    }
    if (best_of > n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "best_of greater than n is not supported (the server does not rank choices); send "
          "best_of equal to n, got best_of ",
          best_of, " and n ", n));
    }
  }
  body->erase("best_of");
  return n;
}

// SGLang's sampling_params.n (one object, or one per prompt with the same n), removed from the
// objects (the one-prompt parser refuses it).
absl::StatusOr<int> TakeGenerateN(Json* body) {
  Json* params = body->is_object() && body->contains("sampling_params")
                     ? &(*body)["sampling_params"]
                     : nullptr;
  if (params == nullptr || params->is_null()) return 1;
  auto take = [](Json* object, const std::string& path) -> absl::StatusOr<int> {
    if (!object->is_object() || !object->contains("n")) return 1;
    const Json& v = (*object)["n"];
    int n = 1;
    if (!v.is_null()) {
      ASSIGN_OR_RETURN(n, ReadN(v, path));
    }
    object->erase("n");
    return n;
  };
  if (!params->is_array()) return take(params, "sampling_params.n");
  int n = 0;
  for (size_t i = 0; i < params->size(); ++i) {
    ASSIGN_OR_RETURN(const int this_n,
                     take(&(*params)[i], absl::StrCat("sampling_params[", i, "].n")));
    if (n != 0 && this_n != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling_params[", i, "].n is ", this_n, " but an earlier entry's is ", n,
                       "; every prompt of a batch must ask for the same n"));
    }
    n = this_n;
  }
  return n == 0 ? 1 : n;
}

// The item rids of a parsed batch (see ParseBatch in request.h). `prompt_rids` holds each
// prompt's rid when the client listed them, else is empty.
void DeriveRids(const std::vector<std::string>& prompt_rids, RoutedBatch* batch) {
  const bool single = batch->single();
  for (size_t k = 0; k < batch->items.size(); ++k) {
    RoutedRequest& item = batch->items[k];
    item.index = static_cast<int>(k);
    item.batch_rid = single ? "" : batch->rid;
    if (single) {
      item.rid = batch->rid;
    } else if (!prompt_rids.empty()) {
      const std::string& base = prompt_rids[k / static_cast<size_t>(batch->n)];
      item.rid = batch->n == 1 ? base : absl::StrCat(base, "_", k % batch->n);
    } else {
      item.rid = absl::StrCat(batch->rid, "_", k);
    }
  }
}

}  // namespace

absl::StatusOr<RoutedBatch> ParseBatch(ApiKind kind, std::string_view body_text,
                                       const ApiContext& ctx) {
  ASSIGN_OR_RETURN(Json body, api_internal::ParseJsonObject(body_text, ctx.max_parsed_json_bytes));
  try {
    RoutedBatch batch;
    // The Responses API has no n: one answer per request.
    if (kind != ApiKind::kResponses) {
      ASSIGN_OR_RETURN(
          batch.n, kind == ApiKind::kGenerate ? TakeGenerateN(&body) : TakeOpenAiN(kind, &body));
    }
    const PromptList list = ListedPrompts(kind, body);
    const size_t prompts = list.key.empty() ? 1 : list.prompts.size();
    if (!list.key.empty() && prompts == 0) {
      return absl::InvalidArgumentError(absl::StrCat(list.key, " is an empty list"));
    }
    if (prompts * static_cast<size_t>(batch.n) > static_cast<size_t>(kMaxBatchChoices)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "this request asks for ", prompts, " prompts x n ", batch.n, " = ",
          prompts * static_cast<size_t>(batch.n), " choices; at most ", kMaxBatchChoices,
          " are allowed per request: split it into several requests"));
    }
    batch.list_response = kind == ApiKind::kGenerate && (!list.key.empty() || batch.n > 1);

    // The per-prompt lists of a /generate batch, then the body without them and without the
    // prompts: what every prompt shares.
    std::vector<std::pair<std::string, const Json*>> per_prompt;
    if (!list.key.empty() && kind == ApiKind::kGenerate) {
      for (const char* key : kGeneratePerPromptKeys) {
        const Json* value = Find(body, key);
        if (value == nullptr || !value->is_array()) continue;
        if (value->size() != prompts) {
          return absl::InvalidArgumentError(absl::StrCat(key, " has ", value->size(),
                                                         " entries for ", prompts,
                                                         " prompts; give one per prompt"));
        }
        per_prompt.emplace_back(key, value);
      }
    }
    Json shared = Json::object();
    for (auto it = body.begin(); it != body.end(); ++it) {
      bool listed = it.key() == list.key;
      for (const auto& [key, value] : per_prompt) listed |= it.key() == key;
      if (!listed) shared[it.key()] = std::move(it.value());  // body keeps only the listed
    }
    batch.rid_list = false;
    for (const auto& [key, value] : per_prompt) batch.rid_list |= key == "rid";
    // One rid for the whole request, generated when the client gave none, so its items'
    // rids share it.
    if (!batch.rid_list) {
      const Json* rid = Find(shared, "rid");
      if (rid == nullptr || (rid->is_string() && rid->get<std::string>().empty())) {
        shared["rid"] = api_internal::NewRid();
      }
    }

    std::vector<std::string> prompt_rids;
    batch.items.reserve(prompts * static_cast<size_t>(batch.n));
    for (size_t i = 0; i < prompts; ++i) {
      Json one;
      if (list.key.empty()) {
        one = std::move(shared);  // the only prompt
      } else {
        one = shared;
        one[list.key] = *list.prompts[i];
        for (const auto& [key, value] : per_prompt) one[key] = (*value)[i];
      }
      absl::StatusOr<RoutedRequest> parsed = api_internal::ParseRequestJson(kind, one, ctx);
      if (!parsed.ok()) {
        if (list.key.empty()) return parsed.status();
        return absl::Status(parsed.status().code(),
                            absl::StrCat(list.key, "[", i, "]: ", parsed.status().message()));
      }
      if (i == 0) {
        batch.rid = parsed->rid;
        batch.include_usage = parsed->include_usage;
      }
      if (batch.rid_list) {
        // Items are keyed by rid on the workers: a repeat would be refused there as a request
        // already in progress (409), which is not what went wrong.
        const auto seen = std::find(prompt_rids.begin(), prompt_rids.end(), parsed->rid);
        if (seen != prompt_rids.end()) {
          return absl::InvalidArgumentError(
              absl::StrCat("rid[", i, "] '", api_internal::Excerpt(parsed->rid), "' repeats rid[",
                           seen - prompt_rids.begin(), "]; give each prompt its own rid"));
        }
        prompt_rids.push_back(parsed->rid);
      }
      for (int j = 0; j < batch.n; ++j) {
        RoutedRequest item = j + 1 < batch.n ? *parsed : std::move(*parsed);
        // Choices of one prompt differ (and stay reproducible) under a client's seed.
        if (item.sampling.has_seed()) item.sampling.set_seed(item.sampling.seed() + j);
        batch.items.push_back(std::move(item));
      }
    }
    DeriveRids(prompt_rids, &batch);
    return batch;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed request: ", e.what()));
  }
}

void SetBatchRid(const std::string& rid, RoutedBatch* batch) {
  batch->rid = rid;
  batch->rid_list = false;
  DeriveRids({}, batch);
}

}  // namespace tandem::router
