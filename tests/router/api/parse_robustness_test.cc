// Feeds 10,000 random, truncated and mutated bodies to each parser: every one must come back as
// a value or a Status (never a crash, an exception or a sanitizer report), and every rejection
// must carry a message.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "router/api/request.h"
#include "router/api/response.h"
#include "tests/router/api/test_tokenizer.h"

namespace tandem::router {
namespace {

const std::vector<std::string>& Seeds() {
  static const std::vector<std::string> seeds = {
      R"({"text":"Hello","sampling_params":{"temperature":0.7,"max_new_tokens":8,"stop":["x"]},"stream":true})",
      R"({"input_ids":[1,2,3],"return_logprob":true,"rid":"r","sampling_params":{"top_k":5}})",
      R"({"model":"tandem-tiny","prompt":"Once","max_tokens":5,"logprobs":0,"stream_options":{"include_usage":true}})",
      R"({"prompt":[[4,5]],"n":1,"stop":null,"seed":3,"top_p":0.5})",
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"t"}]}],"max_completion_tokens":9,"logprobs":true})",
  };
  return seeds;
}

// Characters that steer mutations towards JSON structure and edge values.
constexpr char kAlphabet[] = "{}[]\":,0123456789-+.eE truefalsnul\\\xff\xc3\xa9";

std::string Mutate(std::mt19937_64& rng, std::string body) {
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < edits && !body.empty(); ++i) {
    const size_t pos = rng() % body.size();
    switch (rng() % 6) {
      case 0:  // truncate
        body.resize(pos);
        break;
      case 1:  // replace a byte
        body[pos] = kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
        break;
      case 2:  // insert a byte
        body.insert(body.begin() + static_cast<ptrdiff_t>(pos),
                    kAlphabet[rng() % (sizeof(kAlphabet) - 1)]);
        break;
      case 3:  // delete a span
        body.erase(pos, rng() % 8);
        break;
      case 4:  // duplicate a span
        body.insert(pos, body.substr(pos, rng() % 16));
        break;
      default:  // a random byte anywhere
        body[pos] = static_cast<char>(rng() & 0xff);
        break;
    }
  }
  return body;
}

std::string RandomBytes(std::mt19937_64& rng) {
  std::string body(rng() % 64, '\0');
  for (char& c : body) c = kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return body;
}

void Exercise(ApiKind kind, uint64_t seed) {
  ApiContext ctx;
  ctx.tokenizer = &TinyEnglishTokenizer();
  ctx.served_model_name = "tandem-tiny";
  ctx.context_length = 512;
  std::mt19937_64 rng(seed);
  int accepted = 0;
  for (int i = 0; i < 10000; ++i) {
    const std::string body =
        i % 10 == 0 ? RandomBytes(rng) : Mutate(rng, Seeds()[rng() % Seeds().size()]);
    const absl::StatusOr<RoutedRequest> parsed = ParseRequest(kind, body, ctx);
    if (parsed.ok()) {
      ++accepted;
      EXPECT_FALSE(parsed->input_ids.empty()) << body;
      EXPECT_FALSE(parsed->rid.empty()) << body;
      // Whatever parses must also shape a response.
      ResponseShaper shaper(*parsed, ctx.tokenizer);
      proto::DecodeEvent event;
      event.add_token_ids(parsed->input_ids.front());
      event.set_text("x");
      event.set_finished(true);
      EXPECT_FALSE(shaper.StreamEvent(event).empty());
    } else {
      EXPECT_FALSE(parsed.status().message().empty()) << body;
      const int status = ErrorResponse(parsed.status()).status;
      EXPECT_TRUE(status == 400 || status == 404) << status << " for " << body;
    }
  }
  // The mutations are mild enough that some bodies stay valid: the accepting path ran too.
  EXPECT_GT(accepted, 0);
}

TEST(ParseRobustnessTest, Generate) { Exercise(ApiKind::kGenerate, 1); }
TEST(ParseRobustnessTest, Completions) { Exercise(ApiKind::kCompletions, 2); }
TEST(ParseRobustnessTest, ChatCompletions) { Exercise(ApiKind::kChatCompletions, 3); }

}  // namespace
}  // namespace tandem::router
