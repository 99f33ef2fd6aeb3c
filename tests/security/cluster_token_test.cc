// Cluster tokens (common/cluster_token.h): what a worker accepts and what it refuses, and that
// every refusal says "missing or wrong cluster secret" and why; that a token is good for one
// worker (its audience) only; the workers' proofs; and where the daemons take the secret from.
#include "common/cluster_token.h"

#include <stdlib.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/hmac.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

const std::string kSecret = "cluster-token-test-secret-0123456789";
const char kMethod[] = "/tandem.proto.Worker/Decode";
const char kWorkerA[] = "instance-a-0123456789abcdef";
const char kWorkerB[] = "instance-b-fedcba9876543210";

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
  EXPECT_EQ(mac.size(), kHmacSha256Bytes);
}

TEST(ClusterTokenTest, ConstantTimeEqualsComparesWholeValues) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab")) << "a prefix is not equal";
  EXPECT_FALSE(ConstantTimeEquals("", "")) << "an empty authenticator never matches";
  EXPECT_TRUE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0b", 3)));
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0c", 3)));
}

TEST(ClusterTokenTest, AcceptsAFreshTokenForItsMethod) {
  const absl::Time now = absl::Now();
  const std::string token = MakeClusterToken(kSecret, kMethod, kWorkerA, now);
  EXPECT_EQ(token.rfind("v2.", 0), 0u) << token;
  EXPECT_EQ(token.find(kSecret), std::string::npos) << "the secret must not travel";
  EXPECT_TRUE(VerifyClusterToken(kSecret, kMethod, kWorkerA, token, now).ok());
  // Within the window either way (clock skew between hosts).
  EXPECT_TRUE(VerifyClusterToken(kSecret, kMethod, kWorkerA, token, now + absl::Seconds(59)).ok());
  EXPECT_TRUE(VerifyClusterToken(kSecret, kMethod, kWorkerA, token, now - absl::Seconds(59)).ok());
}

TEST(ClusterTokenTest, RefusesMissingWrongStaleAndMalformedTokens) {
  const absl::Time now = absl::Now();
  ExpectRefused(VerifyClusterToken(kSecret, kMethod, kWorkerA, "", now), "no x-tandem-auth");
  ExpectRefused(
      VerifyClusterToken(
          kSecret, kMethod, kWorkerA,
          MakeClusterToken("another-secret-of-the-same-size", kMethod, kWorkerA, now), now),
      "HMAC does not match");
  // A token recorded for one method cannot open another.
  ExpectRefused(VerifyClusterToken(kSecret, "/tandem.proto.Worker/FlushCache", kWorkerA,
                                   MakeClusterToken(kSecret, kMethod, kWorkerA, now), now),
                "HMAC does not match");
  // A replay after the window, or a token from the future.
  ExpectRefused(
      VerifyClusterToken(kSecret, kMethod, kWorkerA,
                         MakeClusterToken(kSecret, kMethod, kWorkerA, now - absl::Minutes(5)), now),
      "away from this worker's clock");
  ExpectRefused(
      VerifyClusterToken(kSecret, kMethod, kWorkerA,
                         MakeClusterToken(kSecret, kMethod, kWorkerA, now + absl::Minutes(5)), now),
      "away from this worker's clock");
  // A tampered timestamp breaks the HMAC.
  std::string token = MakeClusterToken(kSecret, kMethod, kWorkerA, now);
  token[3] = token[3] == '9' ? '8' : '9';
  ExpectRefused(VerifyClusterToken(kSecret, kMethod, kWorkerA, token, now), "");
  for (const std::string& bad : std::vector<std::string>{
           "v2", "v2.", "v2..", "v3.1.abc", "garbage", "v2.12.zz", "v2.-5." + std::string(64, 'a'),
           "v2.x1." + std::string(64, 'a'), "v2.1." + std::string(63, 'a'),
           "v2.99999999999999999999999." + std::string(64, 'a'), std::string(1000, '.')}) {
    ExpectRefused(VerifyClusterToken(kSecret, kMethod, kWorkerA, bad, now), "");
  }
}

TEST(ClusterTokenTest, ATokenForOneWorkerIsRefusedByAnother) {
  const absl::Time now = absl::Now();
  const std::string for_a = MakeClusterToken(kSecret, kMethod, kWorkerA, now);
  EXPECT_TRUE(VerifyClusterToken(kSecret, kMethod, kWorkerA, for_a, now).ok());
  // Worker B (or A after a restart, with a new instance id) refuses what A was sent.
  ExpectRefused(VerifyClusterToken(kSecret, kMethod, kWorkerB, for_a, now), "another worker");
  ExpectRefused(VerifyClusterToken(kSecret, kMethod, "", for_a, now), "HMAC does not match");
  // The audience is a field of its own: moving bytes between method and audience changes it.
  ExpectRefused(VerifyClusterToken(kSecret, "/tandem.proto.Worker/Dec",
                                   "ode" + std::string(kWorkerA), for_a, now),
                "HMAC does not match");
  // A v1 token (no audience) is refused, saying why.
  ExpectRefused(VerifyClusterToken(kSecret, kMethod, kWorkerA, "v1.1." + std::string(64, 'a'), now),
                "v2 is required");
}

TEST(WorkerProofTest, OnlyTheSecretsHolderAnswersTheNonce) {
  const std::string nonce = RandomHex(32);
  ASSERT_EQ(nonce.size(), 64u);
  EXPECT_NE(RandomHex(32), nonce);
  const std::string target = "127.0.0.1:30006";
  const std::string proof = MakeWorkerProof(kSecret, nonce, target, kWorkerA);
  EXPECT_EQ(proof.size(), 64u);
  EXPECT_TRUE(VerifyWorkerProof(kSecret, nonce, target, kWorkerA, proof).ok());
  auto refused = [](const absl::Status& s) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
    EXPECT_NE(s.message().find("did not prove the cluster secret"), std::string::npos) << s;
  };
  refused(VerifyWorkerProof(
      kSecret, nonce, target, kWorkerA,
      MakeWorkerProof("another-secret-of-the-same-size", nonce, target, kWorkerA)));
  // Bound to the nonce, the address dialled and the instance id it reports.
  refused(VerifyWorkerProof(kSecret, RandomHex(32), target, kWorkerA, proof));
  refused(VerifyWorkerProof(kSecret, nonce, "127.0.0.1:30009", kWorkerA, proof));
  refused(VerifyWorkerProof(kSecret, nonce, target, kWorkerB, proof));
  // Malformed answers from a stranger.
  refused(VerifyWorkerProof(kSecret, nonce, target, kWorkerA, ""));
  refused(VerifyWorkerProof(kSecret, nonce, target, kWorkerA, proof.substr(1)));
  refused(
      VerifyWorkerProof(kSecret, nonce, target, "", MakeWorkerProof(kSecret, nonce, target, "")));
  refused(VerifyWorkerProof(kSecret, nonce, target, "a\nb",
                            MakeWorkerProof(kSecret, nonce, target, "a\nb")));
  refused(VerifyWorkerProof(kSecret, nonce, target, std::string(300, 'x'),
                            MakeWorkerProof(kSecret, nonce, target, std::string(300, 'x'))));
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
