// The tokenizer of models/tandem-tiny-english (ChatML, vocabulary 3072), loaded once per test
// binary, for router/api's tests.
#ifndef TANDEM_TESTS_ROUTER_API_TEST_TOKENIZER_H_
#define TANDEM_TESTS_ROUTER_API_TEST_TOKENIZER_H_

#include <memory>
#include <string>

#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

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

}  // namespace tandem::router

#endif  // TANDEM_TESTS_ROUTER_API_TEST_TOKENIZER_H_
