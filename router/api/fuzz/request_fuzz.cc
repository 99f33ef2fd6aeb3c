// libFuzzer entry point: an HTTP body -> RoutedRequest through the parser the first byte picks
// (0: /generate, 1: /v1/completions, 2: /v1/chat/completions, 3: /v1/responses), then, when it
// parses, the response shaper on a final event and, for chat and responses, on the body's bytes as
// the model's answer (tool calls and reasoning parsed from it); the same body also goes to
// /tokenize's and /detokenize's parsers. Crashes, exceptions, sanitizer reports and an OK parse
// with an empty prompt are findings. The tokenizer comes from $TANDEM_MODEL_DIR (default
// models/tandem-tiny-english relative to the working directory).
//
// Build and run from the repo root: scripts/fuzz.sh request_fuzz (fuzz/CMakeLists.txt compiles
// router/api/*.cc, the tokenizer and the generated messages instrumented). Seeds in
// router/api/fuzz/corpus/: first byte = parser, the rest = the body.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "engine/tokenizer/tokenizer.h"
#include "router/api/request.h"
#include "router/api/response.h"
#include "router/api/responses.h"
#include "router/api/tokenize.h"

namespace {

const tandem::engine::Tokenizer& GetTokenizer() {
  static const tandem::engine::Tokenizer* tokenizer = [] {
    const char* dir = std::getenv("TANDEM_MODEL_DIR");
    auto loaded = tandem::engine::Tokenizer::FromModelDir(
        dir != nullptr ? dir : "models/tandem-tiny-english");
    if (!loaded.ok()) {
      std::fprintf(stderr, "router_request_fuzz: %s\n",
                   std::string(loaded.status().message()).c_str());
      std::abort();
    }
    return loaded->release();
  }();
  return *tokenizer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using tandem::router::ApiKind;
  const ApiKind kinds[] = {ApiKind::kGenerate, ApiKind::kCompletions, ApiKind::kChatCompletions,
                           ApiKind::kResponses};
  constexpr int kKinds = 4;
  tandem::router::ApiContext ctx;
  ctx.tokenizer = &GetTokenizer();
  ctx.served_model_name = "tandem-tiny";
  ctx.context_length = 512;
  ctx.reasoning_parser = (data[0] / kKinds) % 2 == 1;  // chat answers' <think> separated
  // Stored responses for previous_response_id (none match a fuzzed id but by chance).
  tandem::router::ResponseStore store(1 << 20);
  ctx.response_store = &store;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  // The router's parser: every item of a batch is a complete request within the cap.
  const auto batch = tandem::router::ParseBatch(kinds[data[0] % kKinds], body, ctx);
  if (!batch.ok() && batch.status().message().empty()) std::abort();
  if (batch.ok()) {
    if (batch->items.empty() || batch->items.size() > tandem::router::kMaxBatchChoices) {
      std::abort();
    }
    for (const tandem::router::RoutedRequest& item : batch->items) {
      if (item.input_ids.empty() || item.rid.empty()) std::abort();
    }
  }
  // The same body to /tokenize and /detokenize: an answer or an error that says why.
  for (const auto& answer : {tandem::router::TokenizeBody(body, GetTokenizer(), 512),
                             tandem::router::DetokenizeBody(body, GetTokenizer())}) {
    if (!answer.ok() && answer.status().message().empty()) std::abort();
    if (answer.ok() && answer->empty()) std::abort();
  }
  const auto parsed = tandem::router::ParseRequest(kinds[data[0] % kKinds], body, ctx);
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) std::abort();
    return 0;
  }
  if (parsed->input_ids.empty()) std::abort();
  // Alternatives are asked of the workers only with logprobs, and never more than they serve.
  const int top = parsed->sampling.top_logprobs_num();
  if (top < 0 || top > 20 || (top > 0 && !parsed->return_logprob)) std::abort();
  tandem::router::ResponseShaper shaper(*parsed, ctx.tokenizer);
  tandem::proto::DecodeEvent partial;  // a mid-stream event: the per-token path
  partial.add_token_ids(parsed->input_ids.front());
  partial.set_text(parsed->prompt_text.substr(0, 8));
  shaper.StreamEvent(partial);
  tandem::proto::DecodeEvent event;
  event.add_token_ids(parsed->input_ids.front());
  event.add_token_logprobs(-0.5f);
  tandem::proto::TopLogprobs* alternatives = event.add_top_logprobs();
  for (int j = 0; j < top; ++j) {
    alternatives->add_token_ids(
        parsed->input_ids[static_cast<size_t>(j) % parsed->input_ids.size()]);
    alternatives->add_logprobs(-0.5f - static_cast<float>(j));
  }
  event.set_text("x");
  event.set_finished(true);
  shaper.StreamEvent(event);
  shaper.Accumulate(event);
  shaper.Body(0.0);
  if (auto entry = shaper.ToStore()) store.Put(shaper.response_id(), *std::move(entry));
  // The body's bytes as a chat answer, in two pieces: tool calls and reasoning read from
  // arbitrary model output, streamed and not.
  if (parsed->kind == ApiKind::kChatCompletions || parsed->kind == ApiKind::kResponses) {
    tandem::router::ResponseShaper streamed(*parsed, ctx.tokenizer);
    tandem::router::ResponseShaper whole(*parsed, ctx.tokenizer);
    const size_t half = body.size() / 2;
    tandem::proto::DecodeEvent first;
    first.add_token_ids(parsed->input_ids.front());
    first.set_text(std::string(body.substr(0, half)));
    tandem::proto::DecodeEvent last = first;
    last.set_text(std::string(body.substr(half)));
    last.set_finished(true);
    last.mutable_finish_reason()->set_type(tandem::proto::FinishReason::STOP);
    for (const tandem::proto::DecodeEvent* e : {&first, &last}) {
      streamed.StreamEvent(*e);
      whole.Accumulate(*e);
    }
    whole.Body(0.0);
    // A Responses answer is kept with its conversation, and the next turn can name it.
    if (auto entry = whole.ToStore()) store.Put(whole.response_id(), *std::move(entry));
    if (auto entry = streamed.ToStore()) store.Put(streamed.response_id(), *std::move(entry));
    if (parsed->kind == ApiKind::kResponses && store.Get(whole.response_id()) != nullptr) {
      const std::string next =
          "{\"input\":\"x\",\"previous_response_id\":\"" + whole.response_id() + "\"}";
      const auto continued = tandem::router::ParseRequest(ApiKind::kResponses, next, ctx);
      if (!continued.ok() && continued.status().message().empty()) std::abort();
    }
  }
  return 0;
}
