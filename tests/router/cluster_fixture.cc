#include "tests/router/cluster_fixture.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "proto/worker.grpc.pb.h"
#include "router/workers/cluster_credentials.h"
#include "tests/integration/process.h"

namespace tandem::itest {
namespace {

// A stub authenticated for `w` (proven at once).
std::unique_ptr<proto::Worker::Stub> ProvenStub(const WorkerProcess& w) {
  auto channel = router::ConnectProvenWorker(w.grpc_address(), kTestClusterSecret,
                                             absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(channel.ok()) << channel.status();
  return proto::Worker::NewStub(
      channel.ok() ? *channel : router::CreateWorkerChannel(w.grpc_address(), "", nullptr));
}

}  // namespace

std::unique_ptr<RouterProcess> StartClusterRouter(std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"--cluster-secret", kTestClusterSecret});
  return StartRouter(extra);
}

void ClusterTest::StartCluster(const Options& options) {
  colocated_ = StartWorker("colocated", {"--cluster-secret", kTestClusterSecret});
  if (options.second_colocated) {
    colocated2_ = StartWorker("colocated", {"--cluster-secret", kTestClusterSecret});
  }
  prefill_ = StartWorker("prefill");
  decode_ = StartWorker("decode");
  if (options.shared_routers) {
    plain_ = Plain();
    pd_ = Pd();
  }
}

void ClusterTest::TearDownTestSuite() {
  plain_.reset();
  pd_.reset();
  colocated_.reset();
  colocated2_.reset();
  prefill_.reset();
  decode_.reset();
}

std::unique_ptr<RouterProcess> ClusterTest::Plain(std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"--worker-urls", colocated_->url()});
  return StartClusterRouter(extra);
}

std::unique_ptr<RouterProcess> ClusterTest::Pd(std::vector<std::string> extra) {
  extra.insert(extra.begin(),
               {"--pd-disaggregation", "--prefill", prefill_->url(),
                std::to_string(prefill_->bootstrap_port), "--decode", decode_->url()});
  return StartClusterRouter(extra);
}

bool ClusterTest::SharedWorkersBlocksFree(std::string* why) {
  return WaitForAllKvBlocksFree(plain_->port, kTestAdminKey, colocated_->http_port, why) &&
         WaitForAllKvBlocksFree(pd_->port, kTestAdminKey, prefill_->http_port, why) &&
         WaitForAllKvBlocksFree(pd_->port, kTestAdminKey, decode_->http_port, why);
}

nlohmann::json GenerateBody(int max_new, bool stream) {
  return {
      {"text", kPrompt},
      {"sampling_params", {{"temperature", 0}, {"max_new_tokens", max_new}, {"ignore_eos", true}}},
      {"stream", stream}};
}

std::string Auth(const std::string& key) { return "Authorization: Bearer " + key + "\r\n"; }

proto::LoadReport Load(const WorkerProcess& w) {
  auto stub = ProvenStub(w);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  proto::LoadReport load;
  EXPECT_TRUE(stub->GetLoad(&ctx, proto::LoadRequest(), &load).ok());
  return load;
}

bool AllBlocksFree(const WorkerProcess& w) {
  auto stub = ProvenStub(w);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    grpc::ClientContext ctx;
    proto::FlushCacheResponse flush;
    stub->FlushCache(&ctx, proto::FlushCacheRequest(), &flush);
    proto::LoadReport load = Load(w);
    if (flush.flushed() && load.total_kv_blocks() > 0 &&
        load.free_kv_blocks() == load.total_kv_blocks()) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

double LegsEnded(const WorkerProcess& w) {
  const std::string metrics = HttpGet(w.http_port, "/metrics").body;
  double total = 0;
  for (const char* outcome : {"finished", "aborted", "cancelled", "rejected"}) {
    total += MetricValue(metrics,
                         absl::StrCat("tandem_worker_requests_total{outcome=\"", outcome, "\"}"))
                 .value_or(0);
  }
  return total;
}

std::string LongPrompt(const std::string& tag) {
  std::string prompt = "Story " + tag + ":";
  for (int i = 0; i < 8; ++i) {
    prompt += " The lighthouse keeper counted the ships that passed the cape at night.";
  }
  return prompt;
}

}  // namespace tandem::itest
