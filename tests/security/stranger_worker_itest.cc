// "A stranger joins the cluster", with real processes: the admin API is closed without a key
// (403 naming the flags) unless the operator opts out (a warning at start); a "worker" that does
// not hold the cluster secret, added through the admin API, is shown unverified, receives no
// cluster token and no leg while requests keep succeeding on the real workers; and a token made
// for one worker (its audience) is refused by another, as is a proof request relayed to it.
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/server_interceptor.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/cluster_token.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/cluster_proof.grpc.pb.h"
#include "proto/worker.grpc.pb.h"
#include "router/workers/cluster_credentials.h"
#include "tests/common/http_test_client.h"
#include "tests/integration/process.h"
#include "tests/integration/router_process.h"
#include "tests/integration/worker_process.h"

namespace tandem::itest {
namespace {

using nlohmann::json;
using std::chrono::seconds;
using testing::ClientResponse;
using testing::TestClient;

std::string Auth(const std::string& key) { return "Authorization: Bearer " + key + "\r\n"; }

ClientResponse Request(int port, const std::string& method, const std::string& target,
                       const std::string& body = "", const std::string& headers = "") {
  TestClient c(static_cast<uint16_t>(port), 60);
  ClientResponse failed;
  if (!c.SendRequest(method, target, body, "Content-Type: application/json\r\n" + headers)) {
    return failed;
  }
  return c.ReadResponse().value_or(failed);
}

std::string GenerateBody() {
  return json{{"text", "Tell me a fortune."},
              {"sampling_params", {{"temperature", 0}, {"max_new_tokens", 3}}}}
      .dump();
}

// Every call a stranger's gRPC server received: its method and whether it carried a cluster
// token. Filled by a server interceptor, so calls to methods it does not implement count too.
class CallLog {
 public:
  void Add(std::string method, bool token) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back({std::move(method), token});
  }
  struct Call {
    std::string method;
    bool token;
  };
  std::vector<Call> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Call> calls_;
};

class RecordingInterceptor : public grpc::experimental::Interceptor {
 public:
  RecordingInterceptor(CallLog* log, std::string method) : log_(log), method_(std::move(method)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      const auto* metadata = methods->GetRecvInitialMetadata();
      log_->Add(method_, metadata->find(kClusterAuthMetadata) != metadata->end());
    }
    methods->Proceed();
  }

 private:
  CallLog* log_;
  const std::string method_;
};

class RecordingFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RecordingFactory(CallLog* log) : log_(log) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RecordingInterceptor(log_, info->method() == nullptr ? "" : info->method());
  }

 private:
  CallLog* log_;
};

// Looks like a healthy worker, and tries its luck with a proof it cannot make.
class StrangerWorker final : public proto::Worker::CallbackService {
 public:
  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context,
                                   const proto::HealthRequest*,
                                   proto::HealthResponse* response) override {
    response->set_status(proto::HealthResponse::SERVING);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

class StrangerProof final : public proto::ClusterProof::CallbackService {
 public:
  grpc::ServerUnaryReactor* Prove(grpc::CallbackServerContext* context,
                                  const proto::ProveRequest* request,
                                  proto::ProveResponse* response) override {
    response->set_instance_id("stranger");
    response->set_proof(MakeWorkerProof("a-guess-at-the-cluster-secret-0", request->nonce(),
                                        request->target(), "stranger"));
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

// An in-process gRPC server on loopback serving the stranger's services, recording every call.
class Stranger {
 public:
  Stranger() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&worker_);
    builder.RegisterService(&proof_);
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> factories;
    factories.push_back(std::make_unique<RecordingFactory>(&log_));
    builder.experimental().SetInterceptorCreators(std::move(factories));
    server_ = builder.BuildAndStart();
  }
  ~Stranger() {
    server_->Shutdown(std::chrono::system_clock::now() + seconds(5));
    server_->Wait();
  }
  bool ok() const { return server_ != nullptr && port_ > 0; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const CallLog& log() const { return log_; }

 private:
  CallLog log_;
  StrangerWorker worker_;
  StrangerProof proof_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

class StrangerWorkerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    prefill_ = StartWorker("prefill").release();
    decode_ = StartWorker("decode").release();
  }
  static void TearDownTestSuite() {
    delete prefill_;
    delete decode_;
  }

  static std::vector<std::string> PdFlags() {
    return {"--pd-disaggregation",
            "--prefill",
            prefill_->url(),
            std::to_string(prefill_->bootstrap_port),
            "--decode",
            decode_->url(),
            "--cluster-secret",
            kTestClusterSecret};
  }

  static WorkerProcess* prefill_;
  static WorkerProcess* decode_;
};

WorkerProcess* StrangerWorkerTest::prefill_ = nullptr;
WorkerProcess* StrangerWorkerTest::decode_ = nullptr;

TEST_F(StrangerWorkerTest, AdminApiIsClosedWithoutAKeyUnlessTheOperatorOptsOut) {
  // No admin key and no opt-out: built by hand, since StartRouter supplies a key.
  auto closed = std::make_unique<RouterProcess>();
  closed->port = FreePort();
  closed->argv = {BinaryPath("tandem-router"), "--port", std::to_string(closed->port),
                  "--model-path", SourcePath("models/tandem-tiny-english")};
  for (const std::string& flag : PdFlags()) closed->argv.push_back(flag);
  std::string why;
  ASSERT_TRUE(closed->Launch(&why)) << why;
  for (const auto& [method, target] :
       std::vector<std::pair<std::string, std::string>>{{"GET", "/workers"},
                                                        {"POST", "/workers"},
                                                        {"POST", "/add_worker?url=x:1"},
                                                        {"POST", "/flush_cache"},
                                                        {"GET", "/list_workers"}}) {
    SCOPED_TRACE(method + " " + target);
    const std::string body =
        method == "POST" && target == "/workers"
            ? json{{"url", "http://127.0.0.1:1"}, {"worker_type", "decode"}}.dump()
            : "";
    ClientResponse r = Request(closed->port, method, target, body, Auth("anything"));
    EXPECT_EQ(r.status, 403) << r.body;
    const json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error") && j["error"].is_object()) << r.body;
    const std::string message = j["error"].value("message", "");
    EXPECT_NE(message.find("--admin-key"), std::string::npos) << message;
    EXPECT_NE(message.find("--disable-admin-auth"), std::string::npos) << message;
  }
  // Client routes are unaffected.
  EXPECT_EQ(Request(closed->port, "POST", "/generate", GenerateBody()).status, 200);

  // The operator's explicit opt-out: open, and said loudly at start.
  auto open = StartRouter([] {
    std::vector<std::string> flags = PdFlags();
    flags.push_back("--disable-admin-auth");
    return flags;
  }());
  EXPECT_EQ(Request(open->port, "GET", "/workers").status, 200);
  const std::string log = open->process->Output();
  EXPECT_NE(log.find("warn"), std::string::npos) << log;
  EXPECT_NE(log.find("--disable-admin-auth: the admin API"), std::string::npos) << log;

  // The key from a file: 401 without it, 200 with it.
  const std::string key_file = ::testing::TempDir() + "stranger_itest_admin_key";
  {
    std::ofstream out(key_file);
    out << "  admin-key-from-a-file-42  \n";
  }
  auto keyed = StartRouter([&] {
    std::vector<std::string> flags = PdFlags();
    flags.insert(flags.end(), {"--admin-key-file", key_file});
    return flags;
  }());
  EXPECT_EQ(Request(keyed->port, "GET", "/workers").status, 401);
  EXPECT_EQ(Request(keyed->port, "GET", "/workers", "", Auth("admin-key-from-a-file-42")).status,
            200);
}

TEST_F(StrangerWorkerTest, AStrangerAddedAsAWorkerGetsNoTokenAndNoLeg) {
  Stranger stranger;
  ASSERT_TRUE(stranger.ok());
  auto router = StartRouter(PdFlags());
  const std::string admin = Auth(kTestAdminKey);
  ClientResponse added =
      Request(router->port, "POST", "/workers",
              json{{"url", stranger.url()}, {"worker_type", "decode"}}.dump(), admin);
  ASSERT_EQ(added.status, 200) << added.body;

  // Shown unverified once its proof failed, and asked again on the health-check interval (1 s
  // here). Bounded wait: the first attempts go out at once.
  json shown = json::object();
  int proofs = 0;
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    proofs = 0;
    for (const auto& call : stranger.log().calls()) {
      proofs += call.method == router::kProveMethod ? 1 : 0;
    }
    json workers =
        json::parse(Request(router->port, "GET", "/workers", "", admin).body, nullptr, false);
    if (!workers.is_object()) workers = json::object();
    for (const json& w : workers.value("workers", json::array())) {
      if (w.value("url", "") == stranger.url()) shown = w;
    }
    if (proofs >= 2 && shown.value("last_error", "").rfind("unverified:", 0) == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(proofs, 2);
  EXPECT_EQ(shown.value("verified", true), false) << shown.dump();
  EXPECT_EQ(shown.value("healthy", true), false) << shown.dump();
  EXPECT_NE(shown.value("last_error", "").find("unverified: did not prove the cluster secret"),
            std::string::npos)
      << shown.dump();

  // Requests keep succeeding on the real pair (round_robin would pick the stranger every other
  // time were it routable).
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(Request(router->port, "POST", "/generate", GenerateBody()).status, 200);
  }
  // An admin fan-out skips it too (it answers for the stranger without calling it).
  Request(router->port, "POST", "/flush_cache", "", admin);

  // The stranger saw proof requests and nothing else: no token, no leg, no load poll.
  const std::vector<CallLog::Call> calls = stranger.log().calls();
  ASSERT_FALSE(calls.empty());
  for (const auto& call : calls) {
    EXPECT_EQ(call.method, router::kProveMethod);
    EXPECT_FALSE(call.token) << call.method << " carried " << kClusterAuthMetadata;
  }
  const std::string log = router->process->Output();
  EXPECT_NE(log.find("unverified: did not prove the cluster secret"), std::string::npos) << log;
}

TEST_F(StrangerWorkerTest, ATokenForOneWorkerIsRefusedByAnother) {
  ASSERT_FALSE(prefill_->instance_id.empty());
  ASSERT_FALSE(decode_->instance_id.empty());
  ASSERT_NE(prefill_->instance_id, decode_->instance_id);
  auto plain = proto::Worker::NewStub(
      grpc::CreateChannel(decode_->grpc_address(), grpc::InsecureChannelCredentials()));
  auto call_with = [&](const std::string& audience, const std::string& method) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(30));
    ctx.AddMetadata(kClusterAuthMetadata,
                    MakeClusterToken(kTestClusterSecret, method, audience, absl::Now()));
    if (method == "/tandem.proto.Worker/GetLoad") {
      proto::LoadReport load;
      return plain->GetLoad(&ctx, proto::LoadRequest(), &load);
    }
    // A Session opened with a token harvested from another worker (the reported attack).
    auto stream = plain->Session(&ctx);
    stream->WritesDone();
    proto::SessionDown down;
    while (stream->Read(&down)) {
    }
    return stream->Finish();
  };
  for (const char* method : {"/tandem.proto.Worker/GetLoad", "/tandem.proto.Worker/Session"}) {
    SCOPED_TRACE(method);
    // Made for the prefill worker: refused by the decode worker.
    const grpc::Status refused = call_with(prefill_->instance_id, method);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED) << refused.error_message();
    EXPECT_NE(refused.error_message().find("another worker"), std::string::npos)
        << refused.error_message();
  }
  // Made for the decode worker itself: accepted.
  EXPECT_TRUE(call_with(decode_->instance_id, "/tandem.proto.Worker/GetLoad").ok());

  // A proof request relayed to the decode worker for another address is refused.
  auto proof = proto::ClusterProof::NewStub(
      grpc::CreateChannel(decode_->grpc_address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(30));
  proto::ProveRequest relayed = router::NewProveRequest(prefill_->grpc_address());
  proto::ProveResponse answer;
  const grpc::Status status = proof->Prove(&ctx, relayed, &answer);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
}

}  // namespace
}  // namespace tandem::itest
