#include "common/status.h"

#include <string>

#include "gtest/gtest.h"

namespace tandem {
namespace {

absl::StatusOr<int> Parse(bool ok) {
  if (!ok) return absl::InvalidArgumentError("bad number");
  return 42;
}

absl::Status UseAssign(bool ok, int* out) {
  ASSIGN_OR_RETURN(int v, Parse(ok));
  *out = v;
  return absl::OkStatus();
}

absl::Status UseAssignWithPrefix(bool ok, int* out) {
  ASSIGN_OR_RETURN(*out, Parse(ok), "config.yaml: ");
  return absl::OkStatus();
}

absl::Status UseReturnIfError(absl::Status s) {
  RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

absl::Status UseReturnIfErrorWithPrefix(absl::Status s) {
  RETURN_IF_ERROR(s, "loading: ");
  return absl::OkStatus();
}

TEST(StatusTest, AssignOrReturnUnwrapsValue) {
  int v = 0;
  ASSERT_TRUE(UseAssign(true, &v).ok());
  EXPECT_EQ(v, 42);
}

TEST(StatusTest, AssignOrReturnPropagatesError) {
  int v = 0;
  absl::Status s = UseAssign(false, &v);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "bad number");
  EXPECT_EQ(v, 0);
}

TEST(StatusTest, AssignOrReturnAddsPrefixAndKeepsCode) {
  int v = 0;
  absl::Status s = UseAssignWithPrefix(false, &v);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "config.yaml: bad number");
  ASSERT_TRUE(UseAssignWithPrefix(true, &v).ok());
  EXPECT_EQ(v, 42);
}

TEST(StatusTest, ReturnIfError) {
  EXPECT_TRUE(UseReturnIfError(absl::OkStatus()).ok());
  EXPECT_EQ(UseReturnIfError(absl::NotFoundError("x")).code(), absl::StatusCode::kNotFound);
  absl::Status s = UseReturnIfErrorWithPrefix(absl::DataLossError("truncated"));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "loading: truncated");
  EXPECT_TRUE(UseReturnIfErrorWithPrefix(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace tandem
