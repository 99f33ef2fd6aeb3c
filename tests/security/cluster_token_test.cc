// Cluster tokens (common/cluster_token.h): what a worker accepts and what it refuses, and that
// every refusal says "missing or wrong cluster secret" and why.
#include "common/cluster_token.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tandem {
namespace {

const std::string kSecret = "cluster-token-test-secret-0123456789";
const char kMethod[] = "/tandem.proto.Worker/Decode";

void ExpectRefused(const absl::Status& status, const std::string& why) {
  EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << status;
  EXPECT_NE(status.message().find("missing or wrong cluster secret"), std::string::npos) << status;
  EXPECT_NE(status.message().find(why), std::string::npos) << status;
}

TEST(ClusterTokenTest, HmacSha256MatchesRfc4231) {
  // RFC 4231 test case 2.
  const std::string mac = HmacSha256("Jefe", "what do ya want for nothing?");
  std::string hex;
  for (unsigned char c : mac) {
    static const char* d = "0123456789abcdef";
    hex += d[c >> 4];
    hex += d[c & 0xf];
  }
  EXPECT_EQ(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(ClusterTokenTest, AcceptsAFreshTokenForItsMethod) {
  const absl::Time now = absl::Now();
  const std::string token = MakeClusterToken(kSecret, kMethod, now);
  EXPECT_EQ(token.rfind("v1.", 0), 0u) << token;
  EXPECT_EQ(token.find(kSecret), std::string::npos) << "the secret must not travel";
  EXPECT_TRUE(VerifyClusterToken(kSecret, kMethod, token, now).ok());
  // Within the window either way (clock skew between hosts).
  EXPECT_TRUE(VerifyClusterToken(kSecret, kMethod, token, now + absl::Seconds(59)).ok());
  EXPECT_TRUE(VerifyClusterToken(kSecret, kMethod, token, now - absl::Seconds(59)).ok());
}

TEST(ClusterTokenTest, RefusesMissingWrongStaleAndMalformedTokens) {
  const absl::Time now = absl::Now();
  ExpectRefused(VerifyClusterToken(kSecret, kMethod, "", now), "no x-tandem-auth");
  ExpectRefused(
      VerifyClusterToken(kSecret, kMethod,
                         MakeClusterToken("another-secret-of-the-same-size", kMethod, now), now),
      "HMAC does not match");
  // A token recorded for one method cannot open another.
  ExpectRefused(VerifyClusterToken(kSecret, "/tandem.proto.Worker/FlushCache",
                                   MakeClusterToken(kSecret, kMethod, now), now),
                "HMAC does not match");
  // A replay after the window, or a token from the future.
  ExpectRefused(VerifyClusterToken(kSecret, kMethod,
                                   MakeClusterToken(kSecret, kMethod, now - absl::Minutes(5)), now),
                "away from this worker's clock");
  ExpectRefused(VerifyClusterToken(kSecret, kMethod,
                                   MakeClusterToken(kSecret, kMethod, now + absl::Minutes(5)), now),
                "away from this worker's clock");
  // A tampered timestamp breaks the HMAC.
  std::string token = MakeClusterToken(kSecret, kMethod, now);
  token[3] = token[3] == '9' ? '8' : '9';
  ExpectRefused(VerifyClusterToken(kSecret, kMethod, token, now), "");
  for (const std::string& bad : std::vector<std::string>{
           "v1", "v1.", "v1..", "v2.1.abc", "garbage", "v1.12.zz", "v1.-5." + std::string(64, 'a'),
           "v1.x1." + std::string(64, 'a'), "v1.1." + std::string(63, 'a'),
           "v1.99999999999999999999999." + std::string(64, 'a'), std::string(1000, '.')}) {
    ExpectRefused(VerifyClusterToken(kSecret, kMethod, bad, now), "");
  }
}

}  // namespace
}  // namespace tandem
