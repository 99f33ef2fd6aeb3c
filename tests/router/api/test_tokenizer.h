// The tokenizer of models/tandem-tiny-english (ChatML, vocabulary 3072), loaded once per test
// binary, the request context router/api's tests parse with, and the error of a failed parse.
#ifndef TANDEM_TESTS_ROUTER_API_TEST_TOKENIZER_H_
#define TANDEM_TESTS_ROUTER_API_TEST_TOKENIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "router/api/request.h"

namespace tandem::router {

inline const engine::Tokenizer& TinyEnglishTokenizer() {
  static const engine::Tokenizer* tokenizer = [] {
    auto loaded = engine::Tokenizer::FromModelDir(std::string(TANDEM_SOURCE_DIR) +
                                                  "/models/tandem-tiny-english");
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return loaded.ok() ? loaded->release() : nullptr;
  }();
  return *tokenizer;
}

// The tiny tokenizer, served as "tandem-tiny", with a 512-token context.
inline ApiContext TinyEnglishContext() {
  ApiContext ctx;
  ctx.tokenizer = &TinyEnglishTokenizer();
  ctx.served_model_name = "tandem-tiny";
  ctx.context_length = 512;
  return ctx;
}

// The message of a failed parse, checking its code.
inline std::string ErrorOf(const absl::StatusOr<RoutedRequest>& parsed,
                           absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  EXPECT_FALSE(parsed.ok());
  if (parsed.ok()) return "";
  EXPECT_EQ(parsed.status().code(), code) << parsed.status();
  return std::string(parsed.status().message());
}

}  // namespace tandem::router

#endif  // TANDEM_TESTS_ROUTER_API_TEST_TOKENIZER_H_
