// Access control with real processes: the workers' gRPC ports refuse calls without a valid
// cluster token (none, wrong secret, stale) with UNAUTHENTICATED before any handler runs, for a
// prefill, a decode and a colocated worker given a secret; a router holding the secret serves
// through them, one without it shows the workers' refusal per worker; the router over TLS.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/cluster_token.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/worker.grpc.pb.h"
#include "router/workers/cluster_credentials.h"
#include "tests/common/http_test_client.h"
#include "tests/integration/process.h"
#include "tests/integration/worker_process.h"
#include "tests/security/tls_test_util.h"

namespace tandem::itest {
namespace {

using nlohmann::json;
using std::chrono::seconds;

const char kWrongSecret[] = "a-different-cluster-secret-0123456789";
const char kPrompt[] = "Tell me a fortune.";

std::chrono::system_clock::time_point In(int s) {
  return std::chrono::system_clock::now() + seconds(s);
}

grpc::Status GetLoad(proto::Worker::Stub* stub, grpc::ClientContext* ctx) {
  ctx->set_deadline(In(30));
  proto::LoadReport load;
  return stub->GetLoad(ctx, proto::LoadRequest(), &load);
}

std::unique_ptr<proto::Worker::Stub> PlainStub(const WorkerProcess& w) {
  return proto::Worker::NewStub(
      grpc::CreateChannel(w.grpc_address(), grpc::InsecureChannelCredentials()));
}

void ExpectRefused(const grpc::Status& s, const std::string& why) {
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_NE(s.error_message().find("missing or wrong cluster secret"), std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find(why), std::string::npos) << s.error_message();
}

// tandem_engine_prompt_tokens_total from the worker's /metrics (-1 if absent).
double PromptTokens(const WorkerProcess& w) {
  const std::string text = HttpGet(w.http_port, "/metrics").body;
  const std::string key = "\ntandem_engine_prompt_tokens_total ";
  const size_t at = text.find(key);
  return at == std::string::npos ? -1 : std::stod(text.substr(at + key.size()));
}

proto::DecodeRequest Greedy(int max_new) {
  proto::DecodeRequest r;
  r.set_rid("auth-test");
  for (int t : {1, 2, 3, 4, 5, 6, 7, 8}) r.add_input_ids(100 + t);
  r.mutable_sampling_params()->set_max_new_tokens(max_new);
  r.mutable_sampling_params()->set_temperature(0);
  r.mutable_sampling_params()->set_ignore_eos(true);
  return r;
}

struct DecodeOutcome {
  grpc::Status status;
  int events = 0;
};

DecodeOutcome RunDecode(proto::Worker::Stub* stub, const proto::DecodeRequest& request) {
  grpc::ClientContext ctx;
  ctx.set_deadline(In(120));
  DecodeOutcome out;
  auto reader = stub->Decode(&ctx, request);
  proto::DecodeEvent e;
  while (reader->Read(&e)) ++out.events;
  out.status = reader->Finish();
  return out;
}

std::unique_ptr<Process> StartRouter(int port, std::vector<std::string> extra) {
  std::vector<std::string> argv = {BinaryPath("tandem-router"), "--port", std::to_string(port),
                                   "--model-path", SourcePath("models/tandem-tiny-english"),
                                   "--health-check-interval-secs", "1",
                                   "--health-success-threshold", "1", "--health-failure-threshold",
                                   "1", "--policy", "round_robin",
                                   // These tests read /workers; the admin key is not their topic.
                                   "--disable-admin-auth"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<Process>(argv);
}

std::string GenerateBody() {
  return json{{"text", kPrompt}, {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 4}}}}
      .dump();
}

class WorkerAuthTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    prefill_ = StartWorker("prefill").release();
    decode_ = StartWorker("decode").release();
    colocated_ = StartWorker("colocated", {"--cluster-secret", kTestClusterSecret}).release();
  }
  static void TearDownTestSuite() {
    delete prefill_;
    delete decode_;
    delete colocated_;
  }

  std::vector<std::string> PdFlags() const {
    return {"--pd-disaggregation",
            "--prefill",
            prefill_->url(),
            std::to_string(prefill_->bootstrap_port),
            "--decode",
            decode_->url()};
  }

  static WorkerProcess* prefill_;
  static WorkerProcess* decode_;
  static WorkerProcess* colocated_;
};

WorkerProcess* WorkerAuthTest::prefill_ = nullptr;
WorkerProcess* WorkerAuthTest::decode_ = nullptr;
WorkerProcess* WorkerAuthTest::colocated_ = nullptr;

TEST_F(WorkerAuthTest, CallsWithoutValidCredentialsAreRefused) {
  for (WorkerProcess* w : {prefill_, decode_, colocated_}) {
    SCOPED_TRACE(w->role);
    {
      grpc::ClientContext ctx;
      ExpectRefused(GetLoad(PlainStub(*w).get(), &ctx), "no x-tandem-auth");
    }
    {
      auto audience = std::make_shared<router::ClusterAudience>();
      audience->Set(w->instance_id);
      auto wrong = proto::Worker::NewStub(
          router::CreateWorkerChannel(w->grpc_address(), kWrongSecret, audience));
      grpc::ClientContext ctx;
      ExpectRefused(GetLoad(wrong.get(), &ctx), "HMAC does not match");
    }
    {
      // A token that was valid ten minutes ago (a replay) is refused.
      grpc::ClientContext ctx;
      ctx.AddMetadata(kClusterAuthMetadata,
                      MakeClusterToken(kTestClusterSecret, "/tandem.proto.Worker/GetLoad",
                                       w->instance_id, absl::Now() - absl::Minutes(10)));
      ExpectRefused(GetLoad(PlainStub(*w).get(), &ctx), "away from this worker's clock");
    }
    {
      // A valid token for another method does not open this one.
      grpc::ClientContext ctx;
      ctx.AddMetadata(kClusterAuthMetadata,
                      MakeClusterToken(kTestClusterSecret, "/tandem.proto.Worker/Health",
                                       w->instance_id, absl::Now()));
      ExpectRefused(GetLoad(PlainStub(*w).get(), &ctx), "HMAC does not match");
    }
    grpc::ClientContext ctx;
    EXPECT_TRUE(GetLoad(w->stub.get(), &ctx).ok());
  }
}

TEST_F(WorkerAuthTest, RefusedCallsRunNoHandler) {
  const double before = PromptTokens(*colocated_);
  ASSERT_GE(before, 0);
  DecodeOutcome refused = RunDecode(PlainStub(*colocated_).get(), Greedy(4));
  ExpectRefused(refused.status, "");
  EXPECT_EQ(refused.events, 0);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(30));
    proto::PrefillRequest pr;
    pr.set_rid("auth-prefill");
    pr.set_bootstrap_room(4242);
    pr.add_input_ids(101);
    proto::PrefillResponse response;
    ExpectRefused(PlainStub(*prefill_)->Prefill(&ctx, pr, &response), "");
  }
  {
    grpc::ClientContext ctx;
    proto::FlushCacheResponse response;
    ExpectRefused(PlainStub(*colocated_)->FlushCache(&ctx, proto::FlushCacheRequest(), &response),
                  "");
  }
  // The refused Decode carries 8 prompt tokens; the worker's own one-token probes may land
  // meanwhile, so anything short of 8 new prompt tokens means the refused call never ran.
  EXPECT_LT(PromptTokens(*colocated_) - before, 8) << "a refused Decode reached the engine";
  DecodeOutcome served = RunDecode(colocated_->stub.get(), Greedy(4));
  EXPECT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_GT(served.events, 0);
  EXPECT_GT(PromptTokens(*colocated_), before);
}

TEST_F(WorkerAuthTest, RouterWithTheSecretServesWithoutItShowsTheRefusal) {
  const int with_port = FreePort();
  std::vector<std::string> with_flags = PdFlags();
  with_flags.insert(with_flags.end(), {"--cluster-secret", kTestClusterSecret});
  auto with = StartRouter(with_port, with_flags);
  ASSERT_TRUE(WaitForHttp(with_port, "/health", 200, seconds(60))) << with->Output();
  {
    testing::TestClient c(static_cast<uint16_t>(with_port), 120);
    ASSERT_TRUE(c.SendRequest("POST", "/generate", GenerateBody(),
                              "Content-Type: application/json\r\nConnection: close\r\n"));
    auto r = c.ReadResponse();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200) << r->body;
    // The tiny model may stop at once (EOS as its first token, text ""); one token was served.
    const json body = json::parse(r->body, nullptr, false);
    EXPECT_FALSE(body.value("output_ids", json::array()).empty()) << r->body;
  }

  const int without_port = FreePort();
  auto without = StartRouter(without_port, PdFlags());
  ASSERT_TRUE(WaitForHttp(without_port, "/workers", 200, seconds(60))) << without->Output();
  // Each worker's state names the refusal (bounded wait for the first probes).
  bool all_refused = false;
  json workers;
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  while (!all_refused && std::chrono::steady_clock::now() < deadline) {
    workers = json::parse(HttpGet(without_port, "/workers").body, nullptr, false);
    all_refused = workers.contains("workers") && workers["workers"].size() == 2;
    for (const json& w : workers.value("workers", json::array())) {
      const std::string error = w.value("last_error", "");
      all_refused = all_refused && !w.value("healthy", true) &&
                    error.find("missing or wrong cluster secret") != std::string::npos;
    }
    if (!all_refused) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(all_refused) << workers.dump(2);
  EXPECT_EQ(HttpGet(without_port, "/health").status, 503);
  EXPECT_NE(without->Output().find("UNAUTHENTICATED"), std::string::npos);
}

TEST_F(WorkerAuthTest, RouterServesHttpsWhenGivenACertificate) {
  auto cert = sectest::MakeSelfSignedCertificate(::testing::TempDir(), "router_tls");
  const int port = FreePort();
  auto router =
      StartRouter(port, {"--worker-urls", colocated_->url(), "--cluster-secret", kTestClusterSecret,
                         "--tls-cert-file", cert.cert_file, "--tls-key-file", cert.key_file});
  sectest::TlsReply health;
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    health = sectest::TlsRequest(port, cert.cert_file, "GET", "/health", "", "", 10);
    if (health.status == 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_EQ(health.status, 200) << health.error << "\n" << router->Output();
  sectest::TlsReply r = sectest::TlsRequest(port, cert.cert_file, "POST", "/generate",
                                            GenerateBody(), "Content-Type: application/json", 120);
  EXPECT_EQ(r.status, 200) << r.error << r.body;
  // Plain HTTP to the HTTPS port gets no HTTP answer, and the router keeps serving.
  EXPECT_EQ(HttpGet(port, "/health").status, 0);
  EXPECT_EQ(sectest::TlsRequest(port, cert.cert_file, "GET", "/health").status, 200);

  // A bad key file stops the router at start with a message naming it.
  const std::string missing = ::testing::TempDir() + "/no-such-router.key";
  RunResult bad =
      RunToExit({BinaryPath("tandem-router"), "--port", "0", "--model-path",
                 SourcePath("models/tandem-tiny-english"), "--worker-urls", colocated_->url(),
                 "--tls-cert-file", cert.cert_file, "--tls-key-file", missing},
                seconds(60));
  EXPECT_NE(bad.exit_code, 0) << bad.out;
  EXPECT_NE(bad.out.find(missing), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace tandem::itest
