// Cluster tokens (common/cluster_token.h): what a worker accepts and what it refuses, and that
// every refusal says "missing or wrong cluster secret" and why; and where the daemons take the
// secret from.
#include "common/cluster_token.h"

#include <stdlib.h>

#include <cstdio>
#include <fstream>
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

TEST(ClusterSecretTest, FileThenFlagThenEnvironmentEachChecked) {
  const std::string path = ::testing::TempDir() + "/cluster-secret-test";
  {
    std::ofstream out(path);
    out << "  from-the-file-0123456789  \nsecond line ignored\n";
  }
  ::setenv("TANDEM_CLUSTER_SECRET", "from-the-environment-0123", 1);
  EXPECT_EQ(*ResolveClusterSecret(path, "from-the-flag-0123456789", true),
            "from-the-file-0123456789");
  EXPECT_EQ(*ResolveClusterSecret("", "from-the-flag-0123456789", true),
            "from-the-flag-0123456789");
  EXPECT_EQ(*ResolveClusterSecret("", "", true), "from-the-environment-0123");
  ::unsetenv("TANDEM_CLUSTER_SECRET");
  // None given: an error naming every source for the workers, an empty secret for the router.
  absl::StatusOr<std::string> none = ResolveClusterSecret("", "", true);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--cluster-secret-file"), std::string::npos);
  EXPECT_NE(none.status().message().find("TANDEM_CLUSTER_SECRET"), std::string::npos);
  EXPECT_EQ(*ResolveClusterSecret("", "", false), "");
  // Too short, and an unreadable file, each named.
  absl::StatusOr<std::string> short_secret = ResolveClusterSecret("", "short", false);
  ASSERT_FALSE(short_secret.ok());
  EXPECT_NE(short_secret.status().message().find("--cluster-secret: the cluster secret must be "
                                                 "at least 16 bytes, got 5"),
            std::string::npos)
      << short_secret.status();
  absl::StatusOr<std::string> missing = ResolveClusterSecret(path + ".missing", "", false);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(path + ".missing"), std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tandem
