// WorkerCore without gRPC, over an in-process Engine on the shipped model: role checks, rid
// generation, room map, drain refusal, Abort, FlushCache, Health, GetLoad and KV events.
#include "worker/worker_core.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "common/kv_block_hash.h"
#include "gtest/gtest.h"

namespace tandem::worker {
namespace {

std::unique_ptr<engine::Engine> NewEngine(bool radix_cache = true) {
  engine::ServingOptions o;
  o.model_path = std::string(TANDEM_SOURCE_DIR) + "/models/tandem-tiny-english";
  o.kv_cache_memory = "4MiB";
  o.threads = 1;
  o.disable_radix_cache = !radix_cache;
  auto e = engine::Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

// Collects one leg's events and waits for the last.
struct Events {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<proto::DecodeEvent> events;
  bool done = false;

  DecodeEventSink Sink() {
    return [this](proto::DecodeEvent e) {
      std::lock_guard<std::mutex> lock(mu);
      done = e.finished();
      events.push_back(std::move(e));
      cv.notify_all();
    };
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [this] { return done; }));
  }
  std::vector<int32_t> Tokens() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<int32_t> out;
    for (const proto::DecodeEvent& e : events) {
      out.insert(out.end(), e.token_ids().begin(), e.token_ids().end());
    }
    return out;
  }
};

// A 40-token prompt: (40 - 1) / 16 = 2 whole blocks a sibling can share.
proto::DecodeRequest LongPrompt(const std::string& rid, int max_new, const std::string& share) {
  proto::DecodeRequest r;
  r.set_rid(rid);
  for (int32_t t = 0; t < 40; ++t) r.add_input_ids(100 + 7 * t);
  r.mutable_sampling_params()->set_temperature(0);
  r.mutable_sampling_params()->set_max_new_tokens(max_new);
  r.mutable_sampling_params()->set_ignore_eos(true);
  r.set_stream(true);
  r.set_share_prompt_with(share);
  return r;
}

proto::DecodeRequest Request(const std::string& rid, int max_new, bool stream = true) {
  proto::DecodeRequest r;
  r.set_rid(rid);
  for (int32_t t : {21, 22, 23, 24, 25}) r.add_input_ids(t);
  r.mutable_sampling_params()->set_temperature(0);
  r.mutable_sampling_params()->set_max_new_tokens(max_new);
  r.mutable_sampling_params()->set_ignore_eos(true);
  r.set_stream(stream);
  return r;
}

class WorkerCoreTest : public ::testing::Test {
 protected:
  void SetUp() override { engine_ = NewEngine(); }
  void TearDown() override { engine_->Shutdown(); }
  std::unique_ptr<WorkerCore> Core(WorkerRole role) {
    WorkerCoreOptions o;
    o.role = role;
    o.served_model_name = "tiny";
    return std::make_unique<WorkerCore>(engine_.get(), o, &metrics_);
  }
  MetricsRegistry metrics_;
  std::unique_ptr<engine::Engine> engine_;
};

TEST_F(WorkerCoreTest, RolesDecideWhichLegsAreServed) {
  auto decode = Core(WorkerRole::kDecode);
  Events unused;
  auto local = decode->StartDecode(Request("a", 2), unused.Sink());
  EXPECT_EQ(local.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(local.status().message().find("--local-prefill"), std::string::npos);
  proto::DecodeRequest pd = Request("b", 2);
  pd.set_bootstrap_host("10.0.0.1");
  pd.set_bootstrap_port(8998);
  auto remote = decode->StartDecode(pd, unused.Sink());
  EXPECT_EQ(remote.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(remote.status().message().find("not part of this build"), std::string::npos);

  auto colocated = Core(WorkerRole::kColocated);
  EXPECT_EQ(colocated->StartDecode(pd, unused.Sink()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(unused.events.empty());
  EXPECT_EQ(colocated->GetServerInfo().role(), proto::ServerInfo::COLOCATED);
  EXPECT_EQ(decode->GetServerInfo().role(), proto::ServerInfo::DECODE);
}

// Conditional disaggregation: a decode worker allowed to prefill computes a leg that names no
// prefill worker as a colocated worker would (the same tokens), still refuses nothing it took
// before, and (without a radix cache, as tandem-decode runs) frees every block afterwards.
TEST_F(WorkerCoreTest, ADecodeWorkerAllowedToPrefillComputesColocatedLegs) {
  engine::Engine* colocated_engine = engine_.get();
  std::vector<int32_t> colocated_tokens;
  {
    auto colocated = Core(WorkerRole::kColocated);
    Events ev;
    ASSERT_TRUE(colocated->StartDecode(LongPrompt("c", 6, ""), ev.Sink()).ok());
    ev.Wait();
    ASSERT_TRUE(colocated_engine->WaitIdle(10));
    colocated_tokens = ev.Tokens();
  }
  ASSERT_EQ(colocated_tokens.size(), 6u);

  std::unique_ptr<engine::Engine> decode_engine = NewEngine(/*radix_cache=*/false);
  WorkerCoreOptions o;
  o.role = WorkerRole::kDecode;
  o.served_model_name = "tiny";
  o.decode_takes_colocated_legs = true;
  auto decode = std::make_unique<WorkerCore>(decode_engine.get(), o, &metrics_);
  Events ev;
  ASSERT_TRUE(decode->StartDecode(LongPrompt("d", 6, ""), ev.Sink()).ok());
  ev.Wait();
  ASSERT_TRUE(decode_engine->WaitIdle(10));
  EXPECT_EQ(ev.Tokens(), colocated_tokens);
  EXPECT_EQ(ev.events.back().finish_reason().type(), proto::FinishReason::LENGTH);
  // A leg naming a prefill worker still goes to the KV handoff (none in this build).
  proto::DecodeRequest pd = Request("e", 2);
  pd.set_bootstrap_host("10.0.0.1");
  pd.set_bootstrap_port(8998);
  Events unused;
  EXPECT_EQ(decode->StartDecode(pd, unused.Sink()).status().code(),
            absl::StatusCode::kUnimplemented);
  // Cancelled mid-leg, the local prefill frees its blocks too.
  Events cancelled;
  absl::StatusOr<LegId> leg = decode->StartDecode(LongPrompt("f", 400, ""), cancelled.Sink());
  ASSERT_TRUE(leg.ok()) << leg.status();
  decode->CancelDecode(*leg);
  cancelled.Wait();
  ASSERT_TRUE(decode_engine->WaitIdle(10));
  const proto::LoadReport load = decode->GetLoad();
  EXPECT_EQ(load.free_kv_blocks(), load.total_kv_blocks());
  EXPECT_GT(load.total_kv_blocks(), 0);
  decode_engine->Shutdown();
}

TEST_F(WorkerCoreTest, SharingLegsAreServedByDecodeAndColocatedWorkersAndChecked) {
  auto decode = Core(WorkerRole::kDecode);
  Events alone;
  // No prefill worker named and no live leg to share with: a decode worker computes the prompt.
  ASSERT_TRUE(decode->StartDecode(LongPrompt("a", 4, "nobody"), alone.Sink()).ok());
  alone.Wait();
  ASSERT_TRUE(engine_->WaitIdle(10));  // its last callback has returned: `decode` may go
  ASSERT_EQ(alone.events.back().finish_reason().type(), proto::FinishReason::LENGTH);
  EXPECT_EQ(alone.Tokens().size(), 4u);
  auto prefill = Core(WorkerRole::kPrefill);
  Events unused;
  EXPECT_EQ(prefill->StartDecode(LongPrompt("p", 4, "a"), unused.Sink()).status().code(),
            absl::StatusCode::kFailedPrecondition);

  auto colocated = Core(WorkerRole::kColocated);
  for (const std::string& bad : {std::string(257, 'x'), std::string("a\nb"), std::string("self")}) {
    auto leg = colocated->StartDecode(LongPrompt("self", 4, bad), unused.Sink());
    EXPECT_EQ(leg.status().code(), absl::StatusCode::kInvalidArgument) << leg.status();
    EXPECT_NE(leg.status().message().find("share_prompt_with"), std::string::npos);
  }
  proto::DecodeRequest with_host = LongPrompt("h", 4, "a");
  with_host.set_bootstrap_host("10.0.0.1");
  with_host.set_bootstrap_port(8998);
  EXPECT_EQ(decode->StartDecode(with_host, unused.Sink()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(unused.events.empty());
}

TEST_F(WorkerCoreTest, ASiblingLegSharesTheLeadersPromptBlocks) {
  engine_->Shutdown();
  engine_ = NewEngine(/*radix_cache=*/false);  // cached tokens can then only come from sharing
  for (WorkerRole role : {WorkerRole::kColocated, WorkerRole::kDecode}) {
    auto core = Core(role);
    Events leader, sibling;
    // The leader outlives the sibling: it is cancelled once the sibling is done.
    const std::string plain = role == WorkerRole::kDecode ? "nobody" : "";
    auto lead = core->StartDecode(LongPrompt("lead", 400, plain), leader.Sink());
    ASSERT_TRUE(lead.ok()) << lead.status();
    auto sib = core->StartDecode(LongPrompt("sib", 6, "lead"), sibling.Sink());
    ASSERT_TRUE(sib.ok()) << sib.status();
    sibling.Wait();
    EXPECT_FALSE(core->WaitNoLegs(0.05)) << "the leader's leg is still live";
    core->CancelDecode(*lead);
    leader.Wait();
    const proto::DecodeEvent& last = sibling.events.back();
    EXPECT_EQ(last.finish_reason().type(), proto::FinishReason::LENGTH);
    EXPECT_EQ(last.cached_tokens(), 32);
    EXPECT_EQ(last.prompt_tokens(), 40);
    const std::vector<int32_t> lead_tokens = leader.Tokens();
    ASSERT_GE(lead_tokens.size(), 6u);
    EXPECT_EQ(sibling.Tokens(), std::vector<int32_t>(lead_tokens.begin(), lead_tokens.begin() + 6))
        << "greedy: the same prompt gives the same tokens";
    EXPECT_TRUE(core->WaitNoLegs(10));
    ASSERT_TRUE(engine_->WaitIdle(10));  // the rids are free for the next round
  }
  ASSERT_TRUE(engine_->FlushCache().ok());  // Load() is current once this returns
  const engine::SchedulerLoad load = engine_->Load();
  EXPECT_EQ(load.free_blocks, load.total_blocks);
}

TEST_F(WorkerCoreTest, GeneratedRidAndOneAccumulatedEventWithoutStreaming) {
  auto core = Core(WorkerRole::kColocated);
  Events ev;
  auto leg = core->StartDecode(Request("", 7, /*stream=*/false), ev.Sink());
  ASSERT_TRUE(leg.ok()) << leg.status();
  EXPECT_EQ(leg->rid.rfind("req-", 0), 0u) << leg->rid;
  ev.Wait();
  ASSERT_EQ(ev.events.size(), 1u);
  EXPECT_EQ(ev.events[0].token_ids_size(), 7);
  EXPECT_EQ(ev.events[0].finish_reason().type(), proto::FinishReason::LENGTH);
  EXPECT_GT(ev.events[0].timings().first_token_s(), 0);
  // The final event is delivered before the leg is forgotten; the leg must go soon after.
  EXPECT_TRUE(core->WaitNoLegs(10.0)) << core->live_legs() << " legs still live";
}

TEST_F(WorkerCoreTest, AbortByRoomAndDuplicateRoomsAndDrain) {
  auto core = Core(WorkerRole::kColocated);
  Events ev;
  proto::DecodeRequest r = Request("roomed", 400);
  r.set_bootstrap_room(77);
  ASSERT_TRUE(core->StartDecode(r, ev.Sink()).ok());
  Events dup;
  proto::DecodeRequest same_room = Request("other", 4);
  same_room.set_bootstrap_room(77);
  EXPECT_EQ(core->StartDecode(same_room, dup.Sink()).status().code(),
            absl::StatusCode::kAlreadyExists);

  core->BeginDrain();
  EXPECT_EQ(core->StartDecode(Request("late", 4), dup.Sink()).status().code(),
            absl::StatusCode::kUnavailable);
  proto::HealthResponse health;
  core->Health(proto::HealthRequest(), [&](proto::HealthResponse h) { health = h; });
  EXPECT_EQ(health.status(), proto::HealthResponse::DRAINING);

  proto::AbortRequest abort;
  abort.set_bootstrap_room(77);
  EXPECT_TRUE(core->Abort(abort).found());
  ev.Wait();
  EXPECT_EQ(ev.events.back().finish_reason().type(), proto::FinishReason::ABORT);
  EXPECT_TRUE(core->WaitNoLegs(10));
  EXPECT_FALSE(core->Abort(abort).found());
  ASSERT_TRUE(engine_->WaitIdle(10));
  EXPECT_TRUE(core->FlushCache().flushed());
}

// Engine steps count as progress: a worker whose engine is busy with work that yields no token
// the worker saw (a long prefill, a prefill leg) is answered at once, without a probe queued
// behind that work.
TEST_F(WorkerCoreTest, HealthCountsEngineStepsAsProgressWithoutAProbe) {
  auto core = Core(WorkerRole::kColocated);
  engine::Request direct;  // straight to the engine: no leg of this core sees its token
  direct.rid = "direct";
  direct.input_ids = {1, 2, 3};
  direct.sampling.temperature = 0;
  direct.sampling.max_new_tokens = 1;
  direct.sampling.ignore_eos = true;
  ASSERT_TRUE(engine_->Submit(std::move(direct)).ok());
  ASSERT_TRUE(engine_->WaitIdle(10));
  const engine::Engine::Progress progress = engine_->progress();
  EXPECT_GT(progress.step_ended_ns, 0);
  EXPECT_LE(progress.step_started_ns, progress.step_ended_ns);  // no step running now

  proto::HealthRequest request;
  request.set_generate(true);
  std::optional<proto::HealthResponse> answer;
  core->Health(request, [&answer](proto::HealthResponse h) { answer = std::move(h); });
  ASSERT_TRUE(answer.has_value()) << "answered on the spot, not after a probe";
  EXPECT_EQ(answer->status(), proto::HealthResponse::SERVING);
  EXPECT_NE(answer->message().find("finished a step"), std::string::npos) << answer->message();
}

// CheckHealth's answer, which may come from another thread.
using HealthAnswer = std::shared_future<absl::Status>;
HealthAnswer AskHealth(WorkerCore& core) {
  auto answer = std::make_shared<std::promise<absl::Status>>();
  HealthAnswer future = answer->get_future().share();
  core.CheckHealth([answer](absl::Status status) { answer->set_value(std::move(status)); });
  return future;
}
bool Answered(const HealthAnswer& answer) {
  return answer.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}
// The answer, or DEADLINE_EXCEEDED when none came in 60 s.
absl::Status Await(const HealthAnswer& answer) {
  if (answer.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    return absl::DeadlineExceededError("no health answer in 60 s");
  }
  return answer.get();
}

TEST_F(WorkerCoreTest, HealthProbeRunsThroughTheEngine) {
  auto core = Core(WorkerRole::kColocated);
  EXPECT_TRUE(Await(AskHealth(*core)).ok());
  engine_->Shutdown();
  absl::Status down = Await(AskHealth(*core));
  EXPECT_EQ(down.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(down.message().find("shutting down"), std::string::npos) << down;
}

// An engine wedged outside a step (here: an aborted request's last output callback, which the
// loop runs between steps, blocks it) holds no asker: CheckHealth returns at once, askers
// arriving meanwhile share one probe, and without an answer in health_generate_timeout_s they
// all fail.
TEST_F(WorkerCoreTest, AWedgedEngineHoldsNoHealthAskerAndGetsOneProbe) {
  MetricsRegistry engine_metrics;
  engine_->ExportMetrics(&engine_metrics, "tiny");
  Counter& finished =
      engine_metrics.AddCounter("tandem_engine_finished_requests_total", "Requests that finished")
          .Get();
  ASSERT_TRUE(engine_->WaitIdle(10));
  const double finished_before = finished.Value();

  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  engine::Request wedge;
  wedge.rid = "wedge";
  wedge.input_ids = {1, 2, 3};
  wedge.sampling.temperature = 0;
  wedge.sampling.max_new_tokens = 400;  // still running when the abort comes
  wedge.sampling.ignore_eos = true;
  wedge.callbacks.on_output = [&entered, released](const engine::RequestOutput& out) {
    if (!out.last) return;
    entered.set_value();
    released.wait();
  };
  ASSERT_TRUE(engine_->Submit(std::move(wedge)).ok());
  engine_->Abort("wedge", "wedging the loop");
  ASSERT_EQ(entered.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);

  WorkerCoreOptions o;
  o.role = WorkerRole::kColocated;
  o.served_model_name = "tiny";
  o.health_recent_output_s = 0;  // only a probe answers
  o.health_generate_timeout_s = 60;
  WorkerCore patient(engine_.get(), o, &metrics_);
  std::vector<HealthAnswer> answers;
  for (int i = 0; i < 8; ++i) answers.push_back(AskHealth(patient));
  for (const HealthAnswer& a : answers) EXPECT_FALSE(Answered(a)) << "answered while wedged";

  o.health_generate_timeout_s = 0.3;
  WorkerCore hasty(engine_.get(), o, &metrics_);
  const absl::Status late = Await(AskHealth(hasty));
  EXPECT_EQ(late.code(), absl::StatusCode::kUnavailable) << late;
  EXPECT_NE(late.message().find("did not answer a one-token probe within 0.3 s"), std::string::npos)
      << late;
  for (const HealthAnswer& a : answers) EXPECT_FALSE(Answered(a)) << "answered while wedged";

  release.set_value();
  for (const HealthAnswer& a : answers) EXPECT_TRUE(Await(a).ok());
  ASSERT_TRUE(engine_->WaitIdle(30));
  // The patient core's one probe for eight askers and the hasty core's (the wedge was aborted).
  EXPECT_EQ(finished.Value() - finished_before, 2);
}

TEST_F(WorkerCoreTest, KvEventsReportWhatTheRadixCacheStoresAndFlushes) {
  auto core = Core(WorkerRole::kColocated);
  absl::StatusOr<proto::KvEventsReply> empty = core->GetKvEvents(proto::KvEventsRequest());
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->block_size(), engine_->config().block_size);
  EXPECT_FALSE(empty->gap());
  EXPECT_EQ(empty->events_size(), 0);

  Events ev;
  const proto::DecodeRequest prompt = LongPrompt("kv", 2, "");
  ASSERT_TRUE(core->StartDecode(prompt, ev.Sink()).ok());
  ev.Wait();
  ASSERT_TRUE(engine_->WaitIdle(10));
  proto::KvEventsRequest ask_snapshot;
  ask_snapshot.set_snapshot(true);
  absl::StatusOr<proto::KvEventsReply> snap = core->GetKvEvents(ask_snapshot);
  ASSERT_TRUE(snap.ok()) << snap.status();
  EXPECT_EQ(snap->incarnation(), empty->incarnation());
  const std::vector<int32_t> ids(prompt.input_ids().begin(), prompt.input_ids().end());
  const std::vector<uint64_t> chain = KvBlockHashChain(ids, snap->block_size());
  ASSERT_EQ(chain.size(), 2u);
  for (uint64_t h : chain) {
    EXPECT_NE(std::find(snap->stored_hashes().begin(), snap->stored_hashes().end(), h),
              snap->stored_hashes().end());
  }
  absl::StatusOr<proto::KvEventsReply> events = core->GetKvEvents(proto::KvEventsRequest());
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(static_cast<uint64_t>(events->events_size()), snap->seq());
  for (int i = 0; i < events->events_size(); ++i) {
    EXPECT_EQ(events->events(i).seq(), static_cast<uint64_t>(i + 1));
    EXPECT_FALSE(events->events(i).removed());
  }
  EXPECT_EQ(events->events(0).block_hash(), chain[0]);  // parents first

  ASSERT_TRUE(engine_->FlushCache().ok());
  proto::KvEventsRequest after;
  after.set_after_seq(snap->seq());
  absl::StatusOr<proto::KvEventsReply> flushed = core->GetKvEvents(after);
  ASSERT_TRUE(flushed.ok());
  EXPECT_EQ(flushed->events_size(), snap->stored_hashes_size());
  for (const auto& e : flushed->events()) EXPECT_TRUE(e.removed());
  EXPECT_EQ(core->GetKvEvents(ask_snapshot)->stored_hashes_size(), 0);
  // A seq from another incarnation (beyond this log's newest) is a gap.
  after.set_after_seq(flushed->seq() + 100);
  EXPECT_TRUE(core->GetKvEvents(after)->gap());
}

TEST(WorkerCoreKvEventsTest, NoRadixCacheNoEvents) {
  MetricsRegistry metrics;
  auto engine = NewEngine(/*radix_cache=*/false);
  WorkerCoreOptions o;
  o.role = WorkerRole::kColocated;
  WorkerCore core(engine.get(), o, &metrics);
  EXPECT_EQ(core.GetKvEvents(proto::KvEventsRequest()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  engine->Shutdown();
}

}  // namespace
}  // namespace tandem::worker
