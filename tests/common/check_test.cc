// TANDEM_CHECK and TANDEM_CHECK_OK: quiet when the condition holds (the message is not even
// built), the file, line, condition and message on stderr and an abort when it does not.
#include "common/check.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

std::string Counted(int* calls) {
  ++*calls;
  return "built";
}

TEST(CheckTest, HoldingConditionsDoNothingAndBuildNoMessage) {
  int calls = 0;
  TANDEM_CHECK(1 + 1 == 2, Counted(&calls));
  TANDEM_CHECK_OK(absl::OkStatus(), "an operation");
  EXPECT_EQ(calls, 0);
}

TEST(CheckDeathTest, FailedCheckNamesWhereWhatAndWhyThenAborts) {
  const int blocks = 3;
  EXPECT_DEATH(TANDEM_CHECK(blocks < 2, absl::StrCat("blocks = ", blocks)),
               "check_test.cc:[0-9]+: check failed: blocks < 2: blocks = 3");
}

TEST(CheckDeathTest, FailedStatusNamesTheOperationAndTheStatus) {
  EXPECT_DEATH(TANDEM_CHECK_OK(absl::InvalidArgumentError("block 7 is free"), "KV block release"),
               "check failed: KV block release: INVALID_ARGUMENT: block 7 is free");
}

}  // namespace
}  // namespace tandem
