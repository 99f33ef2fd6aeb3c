// Descriptor, frame, auth and wire codecs: round trips and rejection of malformed input.
#include <gtest/gtest.h>

#include "kvtransfer/auth.h"
#include "kvtransfer/descriptor.h"
#include "kvtransfer/frame.h"
#include "kvtransfer/wire.h"
#include "tests/kvtransfer/test_util.h"

namespace tandem::kv {
namespace {

Descriptor SampleDescriptor() {
  Descriptor d;
  d.backend = "tcp";
  d.engine_name = "decode-0";
  d.endpoints = {"tcp://10.0.0.2:5555"};
  d.regions = {{1, 1 << 20, false, 0, 0}, {7, 4096, true, 0xdead0000, 42}};
  d.compat = testing::TestCompat();
  return d;
}

TEST(DescriptorTest, RoundTrips) {
  Descriptor d = SampleDescriptor();
  auto back = DecodeDescriptor(EncodeDescriptor(d));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, d);
  ASSERT_NE(back->FindRegion(7), nullptr);
  EXPECT_EQ(back->FindRegion(7)->rkey, 42u);
  EXPECT_EQ(back->FindRegion(3), nullptr);
}

TEST(DescriptorTest, EveryTruncationIsAnError) {
  std::string bytes = EncodeDescriptor(SampleDescriptor());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeDescriptor(bytes.substr(0, n)).ok()) << "prefix " << n;
  }
  EXPECT_FALSE(DecodeDescriptor(bytes + "x").ok());
}

TEST(DescriptorTest, RejectsBadMagicVersionAndDuplicateRegions) {
  std::string bytes = EncodeDescriptor(SampleDescriptor());
  std::string bad = bytes;
  bad[0] = 'X';
  EXPECT_NE(DecodeDescriptor(bad).status().message().find("magic"), std::string::npos);
  bad = bytes;
  bad[4] = 9;
  EXPECT_NE(DecodeDescriptor(bad).status().message().find("version 9"), std::string::npos);
  Descriptor d = SampleDescriptor();
  d.regions[1].id = 1;
  EXPECT_NE(DecodeDescriptor(EncodeDescriptor(d)).status().message().find("duplicate"),
            std::string::npos);
}

TEST(DescriptorTest, HugeRegionCountDoesNotAllocate) {
  std::string s;
  WireWriter w(&s);
  w.Raw("TKVD", 4);
  w.U16(kDescriptorVersion);
  w.Bytes("tcp");
  w.Bytes("x");
  w.U32(0);
  w.U32(0xffffffffu);
  EXPECT_EQ(DecodeDescriptor(s).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CompatTest, NamesFirstMismatchWithBothValues) {
  CompatibilityRecord a = testing::TestCompat(), b = a;
  EXPECT_TRUE(CheckCompatible(a, b).ok());
  b.layer_count = 28;
  b.dtype = "fp16";
  absl::Status s = CheckCompatible(a, b);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("layer_count: local 24, peer 28"), std::string::npos) << s;
  b = a;
  b.layout = "other";
  EXPECT_NE(
      CheckCompatible(a, b).message().find("layout: local layer/kv/block/head/dim, peer other"),
      std::string::npos);
}

TEST(DescriptorTest, PeerDescriptorIsCheckedForBackendEndpointAndCompat) {
  Descriptor d = SampleDescriptor();
  const std::string bytes = EncodeDescriptor(d);
  auto ok = DecodePeerDescriptor(d.backend, bytes, d.compat);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, d);

  auto wrong_backend = DecodePeerDescriptor("rdma", bytes, d.compat);
  ASSERT_FALSE(wrong_backend.ok());
  EXPECT_EQ(wrong_backend.status().message(),
            "rdma: descriptor is for backend '" + d.backend + "', not rdma");

  CompatibilityRecord local = d.compat;
  local.layer_count += 4;
  auto incompatible = DecodePeerDescriptor(d.backend, bytes, local);
  ASSERT_FALSE(incompatible.ok());
  EXPECT_EQ(incompatible.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(incompatible.status().message().find(d.backend + ": incompatible peer: layer_count"),
            std::string::npos)
      << incompatible.status();

  Descriptor no_endpoint = d;
  no_endpoint.endpoints.clear();
  EXPECT_FALSE(DecodePeerDescriptor(d.backend, EncodeDescriptor(no_endpoint), d.compat).ok());
  EXPECT_FALSE(DecodePeerDescriptor(d.backend, bytes.substr(0, 9), d.compat).ok());
}

TEST(FrameTest, HeaderRoundTripsAndRejectsGarbage) {
  FrameHeader h;
  h.type = FrameType::kWrite;
  h.flags = kFlagAck;
  h.session = 0x1122334455667788ull;
  h.batch = 99;
  h.region = 5;
  h.code = 3;
  h.offset = 1ull << 40;
  h.length = 12345;
  auto bytes = EncodeHeader(h);
  auto back = ParseHeader(bytes.data(), bytes.size());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->session, h.session);
  EXPECT_EQ(back->offset, h.offset);
  EXPECT_EQ(back->type, FrameType::kWrite);
  EXPECT_FALSE(ParseHeader(bytes.data(), bytes.size() - 1).ok());
  auto bad = bytes;
  bad[5] = 0;  // type 0
  EXPECT_FALSE(ParseHeader(bad.data(), bad.size()).ok());
  bad = bytes;
  bad[6] = 0x80;  // unknown flag
  EXPECT_FALSE(ParseHeader(bad.data(), bad.size()).ok());
  bad = bytes;
  bad[4] = 2;  // version
  EXPECT_FALSE(ParseHeader(bad.data(), bad.size()).ok());
}

TEST(FrameTest, HandshakeBodiesRoundTrip) {
  HelloBody hello{MakeNonce(), "prefill-0", testing::TestCompat()};
  auto h = DecodeHello(EncodeHello(hello));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->client_name, "prefill-0");
  EXPECT_EQ(h->compat, hello.compat);
  ChallengeBody c{MakeNonce(), std::string(kProofSize, 'p'), "decode-0"};
  auto cb = DecodeChallenge(EncodeChallenge(c));
  ASSERT_TRUE(cb.ok());
  EXPECT_EQ(cb->server_name, "decode-0");
  EXPECT_FALSE(DecodeHello(EncodeHello(hello).substr(3)).ok());
  EXPECT_FALSE(DecodeChallenge("").ok());
  EXPECT_FALSE(CheckAuthBody("short").ok());
}

TEST(AuthTest, ProofsDependOnSecretRoleNoncesAndNames) {
  const std::string s = "0123456789abcdef", cn = MakeNonce(), sn = MakeNonce();
  std::string p = ComputeProof(s, AuthRole::kClient, cn, sn, "a", "b");
  EXPECT_EQ(p.size(), kProofSize);
  EXPECT_TRUE(ProofEquals(p, ComputeProof(s, AuthRole::kClient, cn, sn, "a", "b")));
  EXPECT_FALSE(ProofEquals(p, ComputeProof(s + "x", AuthRole::kClient, cn, sn, "a", "b")));
  EXPECT_FALSE(ProofEquals(p, ComputeProof(s, AuthRole::kServer, cn, sn, "a", "b")));
  EXPECT_FALSE(ProofEquals(p, ComputeProof(s, AuthRole::kClient, sn, cn, "a", "b")));
  EXPECT_FALSE(ProofEquals(p, ComputeProof(s, AuthRole::kClient, cn, sn, "ab", "")));
  EXPECT_FALSE(ProofEquals(p, p.substr(1)));
  EXPECT_NE(MakeNonce(), MakeNonce());
  EXPECT_FALSE(ValidateClusterSecret("short").ok());
}

TEST(AuthTest, SecretFileMustBePrivate) {
  std::string path = ::testing::TempDir() + "/kv_secret";
  FILE* f = fopen(path.c_str(), "w");
  fputs("0123456789abcdef0123\n", f);
  fclose(f);
  chmod(path.c_str(), 0644);
  EXPECT_EQ(LoadClusterSecretFile(path).status().code(), absl::StatusCode::kPermissionDenied);
  chmod(path.c_str(), 0600);
  auto s = LoadClusterSecretFile(path);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, "0123456789abcdef0123");
  EXPECT_EQ(LoadClusterSecretFile(path + ".missing").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tandem::kv
