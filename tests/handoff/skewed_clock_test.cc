// A tandem-prefill / tandem-decode pair whose wall clocks differ by minutes (one worker runs
// under libfaketime, Debian's faketime package, with its monotonic clock left alone): the KV
// handoff counts only relative budgets across hosts, so
//  - a request whose decode leg registers its room before the prefill leg arrives completes (an
//    absolute deadline from the decode worker's clock would look long past, or far off, to the
//    prefill worker);
//  - a decode leg whose prefill never comes is given up after --bootstrap-timeout +
//    --transfer-timeout on the monotonic clock, not minutes early or late;
//  - a prefill leg whose room is never registered fails after --bootstrap-timeout.
// The worker's gRPC tokens carry a unix timestamp it accepts within 60 s of its own clock
// (common/cluster_token.h), so the test mints them with the skewed worker's clock; a token
// minted with the test's clock is refused, which also shows the skew took effect.
#include <unistd.h>

#include <chrono>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cluster_token.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/client_interceptor.h"
#include "gtest/gtest.h"
#include "proto/worker.grpc.pb.h"
#include "tests/handoff/pd_legs.h"
#include "tests/integration/process.h"
#include "tests/integration/worker_process.h"

namespace tandem::itest {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

constexpr char kFaketimeLibrary[] = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
// The skewed worker's wall clock against the test's.
constexpr absl::Duration kSkew = absl::Minutes(3);
// StartWorker's defaults: --bootstrap-timeout 3, --transfer-timeout 6.
constexpr auto kBootstrapTimeout = seconds(3);
constexpr auto kRoomBudget = seconds(3 + 6);

// Adds a cluster token minted at the test's wall clock + `skew` to every call but Prove.
class SkewedTokenInterceptor : public grpc::experimental::Interceptor {
 public:
  SkewedTokenInterceptor(std::string method, std::string audience, absl::Duration skew)
      : method_(std::move(method)), audience_(std::move(audience)), skew_(skew) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(
          kClusterAuthMetadata,
          MakeClusterToken(kTestClusterSecret, method_, audience_, absl::Now() + skew_));
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  const std::string audience_;
  const absl::Duration skew_;
};

class SkewedTokenFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  SkewedTokenFactory(std::string audience, absl::Duration skew)
      : audience_(std::move(audience)), skew_(skew) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new SkewedTokenInterceptor(info->method() == nullptr ? "" : info->method(), audience_,
                                      skew_);
  }

 private:
  const std::string audience_;
  const absl::Duration skew_;
};

// A stub to `w` whose tokens are minted with its clock: the test's + `skew`.
std::unique_ptr<proto::Worker::Stub> SkewedStub(const WorkerProcess& w, absl::Duration skew) {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<SkewedTokenFactory>(w.instance_id, skew));
  return proto::Worker::NewStub(grpc::experimental::CreateCustomChannelWithInterceptors(
      w.grpc_address(), grpc::InsecureChannelCredentials(), grpc::ChannelArguments(),
      std::move(factories)));
}

// The command line that runs a worker with its wall clock `skew` ahead (negative: behind).
std::vector<std::string> Faketime(absl::Duration skew) {
  const int64_t secs = absl::ToInt64Seconds(skew);
  return {"/usr/bin/env", absl::StrCat("LD_PRELOAD=", kFaketimeLibrary),
          absl::StrCat("FAKETIME=", secs >= 0 ? "+" : "", secs), "FAKETIME_DONT_FAKE_MONOTONIC=1"};
}

// Which worker runs with its wall clock skewed: the prefill worker kSkew ahead, or the decode
// worker kSkew behind (so to the prefill worker, the decode worker's wall-clock instants lie in
// the past either way).
enum class Skewed { kPrefill, kDecode };
void PrintTo(Skewed s, std::ostream* os) {
  *os << (s == Skewed::kPrefill ? "prefill ahead" : "decode behind");
}

class SkewedClockTest : public ::testing::TestWithParam<Skewed> {
 protected:
  void SetUp() override {
    if (access(kFaketimeLibrary, R_OK) != 0) {
      GTEST_SKIP() << kFaketimeLibrary << " is missing: install Debian's faketime package "
                   << "(scripts/install-deps.sh)";
    }
    const bool prefill_skewed = GetParam() == Skewed::kPrefill;
    const absl::Duration prefill_skew = prefill_skewed ? kSkew : absl::ZeroDuration();
    const absl::Duration decode_skew = prefill_skewed ? absl::ZeroDuration() : -kSkew;
    p_ = StartWorker("prefill", {},
                     prefill_skewed ? Faketime(prefill_skew) : std::vector<std::string>{});
    d_ = StartWorker("decode", {},
                     prefill_skewed ? std::vector<std::string>{} : Faketime(decode_skew));
    ASSERT_NE(p_->stub, nullptr);
    ASSERT_NE(d_->stub, nullptr);
    // The skewed worker refuses a token minted with the test's clock: the skew is in effect.
    WorkerProcess* skewed = prefill_skewed ? p_.get() : d_.get();
    {
      grpc::ClientContext ctx;
      proto::LoadReport load;
      const grpc::Status st = skewed->stub->GetLoad(&ctx, proto::LoadRequest(), &load);
      ASSERT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << "the " << skewed->role << " worker accepted an unskewed token: is libfaketime "
          << "in effect? " << st.error_message();
    }
    p_stub_ = SkewedStub(*p_, prefill_skew);
    d_stub_ = SkewedStub(*d_, decode_skew);
  }

  std::unique_ptr<WorkerProcess> p_;
  std::unique_ptr<WorkerProcess> d_;
  std::unique_ptr<proto::Worker::Stub> p_stub_;  // tokens minted with each worker's own clock
  std::unique_ptr<proto::Worker::Stub> d_stub_;
};

TEST_P(SkewedClockTest, RoomRegisteredBeforeItsPrefillLegCompletes) {
  const std::vector<int32_t> prompt = {41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52};
  DecodeResult decoded;
  std::thread decode(
      [&] { decoded = Decode(d_stub_.get(), DecodeLeg(*p_, 7001, prompt, GreedyParams(6))); });
  // The decode leg holds its blocks and has registered the room with the prefill worker before
  // the prefill leg arrives: the registration waits there on the budget it carries.
  const auto give_up = Clock::now() + seconds(10);
  while (Clock::now() < give_up) {
    const proto::LoadReport load = Load(d_stub_.get());
    if (load.running_requests() + load.queued_requests() > 0) break;
    std::this_thread::sleep_for(milliseconds(10));
  }
  std::this_thread::sleep_for(milliseconds(500));
  proto::PrefillResponse presp;
  const grpc::Status pst =
      Prefill(p_stub_.get(), PrefillLeg(7001, prompt, GreedyParams(6)), &presp);
  decode.join();
  ASSERT_TRUE(pst.ok()) << pst.error_message();
  ASSERT_TRUE(decoded.status.ok()) << decoded.status.error_message();
  EXPECT_EQ(decoded.last.finish_reason().type(), proto::FinishReason::LENGTH)
      << decoded.last.finish_reason().message();
  ASSERT_EQ(decoded.tokens.size(), 6u);
  EXPECT_EQ(presp.first_token_id(), decoded.tokens[0]);
  ExpectAllBlocksReturn(d_stub_.get(), "decode");
}

TEST_P(SkewedClockTest, DecodeLegWithoutPrefillIsGivenUpAtItsBudget) {
  const std::vector<int32_t> prompt = {61, 62, 63, 64, 65, 66, 67, 68};
  const auto t0 = Clock::now();
  DecodeResult r = Decode(d_stub_.get(), DecodeLeg(*p_, 7002, prompt, GreedyParams(4)));
  const auto took = Clock::now() - t0;
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.last.finish_reason().type(), proto::FinishReason::ABORT);
  EXPECT_NE(r.last.finish_reason().message().find("no KV cache from prefill worker"),
            std::string::npos)
      << r.last.finish_reason().message();
  // Not before the budget, and long before the 3 minutes of skew would matter.
  EXPECT_GE(took, kRoomBudget - milliseconds(100));
  EXPECT_LT(took, kRoomBudget + seconds(10));
  ExpectAllBlocksReturn(d_stub_.get(), "decode");
}

TEST_P(SkewedClockTest, PrefillLegWithoutRoomFailsAtBootstrapTimeout) {
  const std::vector<int32_t> prompt = {71, 72, 73, 74, 75, 76};
  const auto t0 = Clock::now();
  proto::PrefillResponse resp;
  const grpc::Status st = Prefill(p_stub_.get(), PrefillLeg(7003, prompt, GreedyParams(4)), &resp);
  const auto took = Clock::now() - t0;
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_NE(st.error_message().find("--bootstrap-timeout"), std::string::npos)
      << st.error_message();
  EXPECT_GE(took, kBootstrapTimeout - milliseconds(100));
  EXPECT_LT(took, kBootstrapTimeout + seconds(10));
  ExpectAllBlocksReturn(p_stub_.get(), "prefill");
}

INSTANTIATE_TEST_SUITE_P(OneSideSkewed, SkewedClockTest,
                         ::testing::Values(Skewed::kPrefill, Skewed::kDecode),
                         [](const ::testing::TestParamInfo<Skewed>& info) {
                           return info.param == Skewed::kPrefill ? std::string("PrefillAhead")
                                                                 : std::string("DecodeBehind");
                         });

}  // namespace
}  // namespace tandem::itest
