// The session socket's pre-authentication rules (worker/session_preauth.h): the first message's
// check and the caps on connections that have not authenticated.
#include "worker/session_preauth.h"

#include <string>

#include "absl/time/clock.h"
#include "common/cluster_token.h"
#include "common/frames.h"
#include "gtest/gtest.h"

namespace tandem::worker {
namespace {

constexpr char kSecret[] = "0123456789abcdef-preauth-secret";
constexpr char kChallenge[] = "tandem-session-v1 00112233445566778899aabbccddeeff";
constexpr char kAudience[] = "preauth-test-instance";

TEST(SessionPreauthTest, TheFirstMessageMustCarryATokenForThisChallenge) {
  proto::SessionUp up;
  up.set_auth(MakeClusterToken(kSecret, kChallenge, kAudience, absl::Now()));
  proto::SessionUp got;
  EXPECT_TRUE(OpenFirstSessionMessage(kSecret, kChallenge, kAudience, up.SerializeAsString(),
                                      absl::Now(), &got)
                  .ok());
  EXPECT_EQ(got.auth(), up.auth());

  const absl::Status other = OpenFirstSessionMessage(kSecret, "tandem-session-v1 ffff", kAudience,
                                                     up.SerializeAsString(), absl::Now(), &got);
  EXPECT_EQ(other.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(other.message().rfind("missing or wrong cluster secret", 0), 0u) << other;
  // A token for this challenge but another worker (relayed by a stranger) is refused too.
  const absl::Status elsewhere = OpenFirstSessionMessage(kSecret, kChallenge, "another-instance",
                                                         up.SerializeAsString(), absl::Now(), &got);
  EXPECT_EQ(elsewhere.code(), absl::StatusCode::kUnauthenticated);

  const absl::Status junk =
      OpenFirstSessionMessage(kSecret, kChallenge, kAudience, "\xff\xff\xff", absl::Now(), &got);
  EXPECT_EQ(junk.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(junk.message(), "a 3-byte message on the session socket is not a SessionUp");

  // Without a secret any SessionUp opens the session.
  EXPECT_TRUE(OpenFirstSessionMessage("", kChallenge, "", "", absl::Now(), &got).ok());
}

TEST(SessionPreauthTest, TheRoutersFirstMessageFitsThePreAuthLimit) {
  proto::SessionUp up;
  up.set_auth(MakeClusterToken(kSecret, kChallenge, kAudience, absl::Now()));
  EXPECT_LT(up.ByteSizeLong() + kFrameHeaderBytes, kMaxPreAuthFrameBytes / 8);
}

TEST(SessionPreauthTest, CapsPerAddressAndInTotal) {
  PreAuthAdmission admission(/*max_total=*/5, /*max_per_address=*/3);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(admission.TryAdmit("10.0.0.1"));
  EXPECT_FALSE(admission.TryAdmit("10.0.0.1"));
  EXPECT_TRUE(admission.TryAdmit("10.0.0.2"));
  EXPECT_TRUE(admission.TryAdmit("10.0.0.2"));
  EXPECT_FALSE(admission.TryAdmit("10.0.0.3"));  // the total
  EXPECT_EQ(admission.total(), 5);
  admission.Leave("10.0.0.1");
  EXPECT_TRUE(admission.TryAdmit("10.0.0.3"));
  EXPECT_FALSE(admission.TryAdmit("10.0.0.1"));
  admission.Leave("10.0.0.2");
  EXPECT_TRUE(admission.TryAdmit("10.0.0.1"));
  EXPECT_EQ(admission.total(), 5);
}

}  // namespace
}  // namespace tandem::worker
