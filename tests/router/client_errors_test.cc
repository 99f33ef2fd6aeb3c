#include "router/client_errors.h"

#include <string>

#include "gtest/gtest.h"
#include "router/api/response.h"

namespace tandem::router {
namespace {

TEST(RedactAddressesTest, AddressesAreReplacedAndTheRestKept) {
  EXPECT_EQ(RedactAddresses("prefill worker http://127.0.0.1:32006: connection refused"),
            "prefill worker <address>: connection refused");
  EXPECT_EQ(RedactAddresses("failed to connect to all addresses; last error: UNKNOWN: "
                            "ipv4:127.0.0.1:32006: Failed to connect to remote host"),
            "failed to connect to all addresses; last error: UNKNOWN: ipv4:<address>: Failed "
            "to connect to remote host");
  EXPECT_EQ(RedactAddresses("bootstrap 10.1.2.3 unreachable"), "bootstrap <address> unreachable");
  EXPECT_EQ(RedactAddresses("peer [::1]:8998 closed"), "peer <address> closed");
  EXPECT_EQ(RedactAddresses("dial localhost:8000 failed"), "dial <address> failed");
  EXPECT_EQ(RedactAddresses("grpc://worker-3.internal:8000/x, then"), "<address>, then");
  // Not addresses: versions, counts, words.
  EXPECT_EQ(RedactAddresses("prompt of 1.5 tokens, v1.2.3, localhostname"),
            "prompt of 1.5 tokens, v1.2.3, localhostname");
  EXPECT_EQ(RedactAddresses("The input (600 tokens) is longer than the model's context length "
                            "(512 tokens)."),
            "The input (600 tokens) is longer than the model's context length (512 tokens).");
}

TEST(ClientLegErrorTest, NamesTheRoleNotTheWorker) {
  const absl::Status s = ClientLegError(absl::StatusCode::kUnavailable, "prefill",
                                        "connect to http://10.0.0.7:32006 failed");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "the prefill worker failed: connect to <address> failed");
}

TEST(LegBytesTest, BoundCoversTheIdsAndFlagsOversizedLegs) {
  RoutedRequest small;
  small.input_ids = {1, 200, 70000, 2147483647};
  EXPECT_GE(LegBytesUpperBound(small), 1 + 2 + 3 + 5u);
  EXPECT_LT(LegBytesUpperBound(small), kMaxLegBytes);
  RoutedRequest huge;
  huge.input_ids.assign(14 << 20, 3000000);  // 4 bytes each: 56 MiB of ids
  huge.sampling.add_stop(std::string(9 << 20, 's'));
  EXPECT_GT(LegBytesUpperBound(huge), kMaxLegBytes);
}

TEST(WithHttpStatusTest, ExplicitStatusWinsOverTheCode) {
  EXPECT_EQ(HttpStatusFor(WithHttpStatus(absl::ResourceExhaustedError("too big"), 413)), 413);
  EXPECT_EQ(HttpStatusFor(absl::ResourceExhaustedError("queue full")), 429);
  EXPECT_EQ(HttpStatusFor(absl::AlreadyExistsError("rid taken")), 409);
  EXPECT_EQ(ErrorResponse(WithHttpStatus(absl::ResourceExhaustedError("too big"), 413)).status,
            413);
}

}  // namespace
}  // namespace tandem::router
