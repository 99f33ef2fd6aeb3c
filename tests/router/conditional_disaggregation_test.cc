// Conditional disaggregation (router/disaggregation.h, docs/router.md "Conditional
// disaggregation"): the rules as pure functions, then the Dispatcher in PD mode against in-memory
// legs (tests/router/fake_legs.h) and a ManualClock: a short prompt goes to its decode worker as
// one plain leg (no prefill leg, no room), a long one as a pair; a saturated prefill pool sends a
// prompt to a decode worker whose load report shows headroom, and only then; the decision is
// counted by label; a local attempt is aborted by rid, retried with a new decision, and the
// prefill workers' in-flight prompt tokens return to zero whatever ends their legs. No sockets,
// no sleeps.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/manual_clock.h"
#include "common/metrics.h"
#include "router/disaggregation.h"
#include "router/dispatcher.h"
#include "router/policy/simple_policies.h"
#include "router/router_metrics.h"
#include "router/workers/worker_registry.h"
#include "tests/router/fake_legs.h"

namespace tandem::router {
namespace {

using fakes::FakeLink;
using fakes::LegBook;

TEST(DisaggregationRulesTest, ShortPromptsAndHeadroom) {
  DisaggregationOptions o;
  EXPECT_FALSE(o.enabled());
  EXPECT_FALSE(ShortEnoughForLocalPrefill(o, 1));  // 0: off
  o.local_prefill_max_tokens = 64;
  EXPECT_TRUE(o.enabled());
  EXPECT_TRUE(ShortEnoughForLocalPrefill(o, 64));
  EXPECT_FALSE(ShortEnoughForLocalPrefill(o, 65));

  proto::LoadReport load;
  EXPECT_FALSE(DecodeHasHeadroom(load, 10));  // no report yet: no headroom known
  load.set_total_kv_blocks(100);
  load.set_kv_block_size(16);
  load.set_free_kv_blocks(4);
  EXPECT_TRUE(DecodeHasHeadroom(load, 64));  // 4 blocks
  EXPECT_FALSE(DecodeHasHeadroom(load, 65));
  load.set_queued_requests(1);
  EXPECT_FALSE(DecodeHasHeadroom(load, 16));  // a worker that queues has no headroom

  EXPECT_STREQ(DisaggregationName(Disaggregation::kPd), "pd");
  EXPECT_STREQ(DisaggregationName(Disaggregation::kLocalShort), "local_short");
  EXPECT_STREQ(DisaggregationName(Disaggregation::kLocalSaturated), "local_saturated");
  EXPECT_FALSE(PrefillPoolSaturated(o, {}));  // threshold 0: off
  o.prefill_saturation_tokens = 10;
  EXPECT_FALSE(PrefillPoolSaturated(o, {}));  // no prefill worker is no saturated pool
}

struct Outcome {
  std::vector<proto::DecodeEvent> events;
  std::optional<absl::Status> status;
};

class ConditionalDisaggregationTest : public ::testing::Test {
 protected:
  void SetUpCluster(DisaggregationOptions disaggregation, int prefills = 2) {
    RegistryOptions ro;
    ro.health_success_threshold = 1;
    ro.now = [this] { return clock_.Now(); };
    registry_ = std::make_unique<WorkerRegistry>(ro, &metrics_);  // never started: no probes
    int port = 32001;
    auto add = [&](WorkerType type, std::optional<int> bootstrap) {
      const std::string url = absl::StrCat("http://127.0.0.1:", port++);
      ASSERT_TRUE(
          registry_->Add(url, type, bootstrap, std::make_shared<FakeLink>(url, &book_, &clock_))
              .ok());
      registry_->RecordHealthCheck(url, /*serving=*/true);
      (type == WorkerType::kPrefill ? prefill_urls_ : decode_urls_).push_back(url);
    };
    for (int i = 0; i < prefills; ++i) add(WorkerType::kPrefill, 8998);
    for (int i = 0; i < 2; ++i) add(WorkerType::kDecode, std::nullopt);
    router_metrics_ = std::make_unique<RouterMetrics>(&metrics_);
    prefill_policy_ = std::make_unique<RoundRobinPolicy>(&metrics_);
    decode_policy_ = std::make_unique<RoundRobinPolicy>(&metrics_);
    DispatchOptions options;
    options.pd_mode = true;
    options.backoff.max_retries = 2;
    options.backoff.initial_backoff = absl::Milliseconds(100);
    options.backoff.max_backoff = absl::Milliseconds(100);
    options.stall_timeout = absl::ZeroDuration();
    options.disaggregation = disaggregation;
    dispatcher_ =
        std::make_unique<Dispatcher>(options, registry_.get(), prefill_policy_.get(),
                                     decode_policy_.get(), router_metrics_.get(), &clock_);
  }

  void TearDown() override {
    tearing_down_ = true;
    for (const LegBook::Started& s : book_.legs) s.leg->Fail(absl::CancelledError("teardown"));
    clock_.RunDue();
    clock_.Clear();
    dispatcher_.reset();
  }

  std::shared_ptr<DispatchRun> Start(const std::string& rid, int prompt_tokens, Outcome* out,
                                     int max_new_tokens = 4) {
    auto r = std::make_shared<RoutedRequest>();
    r->rid = rid;
    for (int i = 0; i < prompt_tokens; ++i) r->input_ids.push_back(100 + i);
    r->sampling.set_max_new_tokens(max_new_tokens);
    r->stream = true;
    return dispatcher_->Start(
        r,
        [this, out](const proto::DecodeEvent& e) {
          if (!tearing_down_) out->events.push_back(e);
        },
        [this, out](absl::Status s) {
          if (tearing_down_) return;
          EXPECT_FALSE(out->status.has_value()) << "on_done ran twice";
          out->status = std::move(s);
        });
  }

  double Decisions(const std::string& decision) const {
    const std::string prefix =
        absl::StrCat("tandem_router_disaggregation_decisions_total{decision=\"", decision, "\"} ");
    for (absl::string_view line : absl::StrSplit(metrics_.Render(), '\n')) {
      if (!absl::StartsWith(line, prefix)) continue;
      double v = 0;
      EXPECT_TRUE(absl::SimpleAtod(line.substr(prefix.size()), &v)) << line;
      return v;
    }
    ADD_FAILURE() << "no series " << prefix;
    return -1;
  }

  int64_t PrefillTokens(const std::string& url) const {
    return registry_->Find(url)->prefill_tokens();
  }

  void ReportDecodeLoad(int64_t free_blocks, int queued = 0) {
    for (const std::string& url : decode_urls_) {
      proto::LoadReport load;
      load.set_total_kv_blocks(100);
      load.set_free_kv_blocks(free_blocks);
      load.set_kv_block_size(16);
      load.set_queued_requests(queued);
      registry_->RecordLoad(url, load);
    }
  }

  ManualClock clock_;
  MetricsRegistry metrics_;
  LegBook book_;
  std::vector<std::string> prefill_urls_;
  std::vector<std::string> decode_urls_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<RouterMetrics> router_metrics_;
  std::unique_ptr<Policy> prefill_policy_;
  std::unique_ptr<Policy> decode_policy_;
  std::unique_ptr<Dispatcher> dispatcher_;
  bool tearing_down_ = false;
};

TEST_F(ConditionalDisaggregationTest, AShortPromptGoesToItsDecodeWorkerAndALongOneAsAPair) {
  DisaggregationOptions o;
  o.local_prefill_max_tokens = 32;
  SetUpCluster(o);
  EXPECT_EQ(Decisions("local_short"), 0);  // every series shows from start-up

  Outcome short_out;
  Start("short", 32, &short_out);
  std::vector<LegBook::Started> legs = book_.Named("short");
  ASSERT_EQ(legs.size(), 1u);  // no prefill leg
  EXPECT_FALSE(legs[0].prefill);
  EXPECT_EQ(legs[0].room, 0u);  // no room
  EXPECT_TRUE(legs[0].bootstrap_host.empty());
  EXPECT_EQ(registry_->Find(legs[0].worker)->type(), WorkerType::kDecode);
  EXPECT_EQ(Decisions("local_short"), 1);
  legs[0].leg->Emit(7);
  legs[0].leg->Answer();
  ASSERT_TRUE(short_out.status.has_value());
  EXPECT_TRUE(short_out.status->ok()) << *short_out.status;
  EXPECT_EQ(short_out.events.size(), 2u);

  Outcome long_out;
  Start("long", 33, &long_out);
  legs = book_.Named("long");
  ASSERT_EQ(legs.size(), 2u);
  EXPECT_TRUE(legs[0].prefill);
  EXPECT_NE(legs[1].room, 0u);
  EXPECT_EQ(legs[0].room, legs[1].room);
  EXPECT_FALSE(legs[1].bootstrap_host.empty());
  EXPECT_EQ(Decisions("pd"), 1);
  EXPECT_EQ(PrefillTokens(legs[0].worker), 33);
  legs[0].leg->Answer();
  EXPECT_EQ(PrefillTokens(legs[0].worker), 0);
  legs[1].leg->Answer();
  ASSERT_TRUE(long_out.status.has_value());
  EXPECT_TRUE(long_out.status->ok()) << *long_out.status;

  // Generating nothing has no decode leg to prefill on: the prefill worker answers it alone, and
  // no decision is counted.
  Outcome score;
  Start("score", 4, &score, /*max_new_tokens=*/0);
  legs = book_.Named("score");
  ASSERT_EQ(legs.size(), 1u);
  EXPECT_TRUE(legs[0].prefill);
  EXPECT_EQ(Decisions("local_short") + Decisions("pd"), 2);
}

TEST_F(ConditionalDisaggregationTest, OffByDefault) {
  SetUpCluster({});
  Outcome out;
  Start("r", 2, &out);
  ASSERT_EQ(book_.Named("r").size(), 2u);
  EXPECT_EQ(Decisions("pd"), 1);
  EXPECT_EQ(Decisions("local_short"), 0);
}

TEST_F(ConditionalDisaggregationTest,
       ASaturatedPrefillPoolSendsPromptsToADecodeWorkerWithHeadroom) {
  DisaggregationOptions o;
  o.prefill_saturation_tokens = 40;
  SetUpCluster(o, /*prefills=*/2);
  Outcome a, b, c, d, e, f;
  // 48 prompt tokens each: one in flight on a prefill worker puts it above 40.
  Start("a", 48, &a);
  EXPECT_EQ(book_.Named("a").size(), 2u);
  EXPECT_EQ(Decisions("pd"), 1);
  // One prefill worker above the threshold is not a saturated pool.
  Start("b", 48, &b);
  EXPECT_EQ(book_.Named("b").size(), 2u);
  EXPECT_EQ(PrefillTokens(prefill_urls_[0]), 48);
  EXPECT_EQ(PrefillTokens(prefill_urls_[1]), 48);
  // Both are above it, but no decode worker reported its load yet: no headroom known, so PD.
  Start("c", 48, &c);
  EXPECT_EQ(book_.Named("c").size(), 2u);
  EXPECT_EQ(Decisions("local_saturated"), 0);
  // A decode worker that reports room for the prompt and its tokens takes it.
  ReportDecodeLoad(/*free_blocks=*/4);  // 64 tokens: 48 + 4 fit
  Start("d", 48, &d);
  std::vector<LegBook::Started> legs = book_.Named("d");
  ASSERT_EQ(legs.size(), 1u);
  EXPECT_FALSE(legs[0].prefill);
  EXPECT_EQ(legs[0].room, 0u);
  EXPECT_EQ(Decisions("local_saturated"), 1);
  // Not when its KV would not hold it, nor when it queues.
  Start("e", 48, &e, /*max_new_tokens=*/17);  // 65 tokens: 5 blocks
  EXPECT_EQ(book_.Named("e").size(), 2u);
  ReportDecodeLoad(/*free_blocks=*/50, /*queued=*/1);
  Start("f", 48, &f);
  EXPECT_EQ(book_.Named("f").size(), 2u);
  EXPECT_EQ(Decisions("pd"), 5);
  EXPECT_EQ(Decisions("local_saturated"), 1);

  // Prefill legs that answer, fail or are cancelled give their tokens back.
  book_.Prefill("a")->Answer();
  book_.Prefill("b")->Fail(absl::InternalError("boom"));
  clock_.Advance(std::chrono::milliseconds(10));
  for (const char* rid : {"c", "e", "f"}) book_.Prefill(rid)->Fail(absl::CancelledError("gone"));
  clock_.Advance(std::chrono::milliseconds(10));
  // b's retry went out as a new pair (the pool is no longer saturated): answer it too.
  if (auto retry = book_.Prefill("b-retry1")) retry->Answer();
  for (const std::string& url : prefill_urls_) {
    EXPECT_EQ(PrefillTokens(url), 0) << url;
  }
}

TEST_F(ConditionalDisaggregationTest, ALocalAttemptIsAbortedByRidAndDecidedAgainOnRetry) {
  DisaggregationOptions o;
  o.local_prefill_max_tokens = 16;
  SetUpCluster(o);
  Outcome out;
  Start("r", 8, &out);
  std::vector<LegBook::Started> legs = book_.Named("r");
  ASSERT_EQ(legs.size(), 1u);
  const std::string first_worker = legs[0].worker;
  legs[0].leg->Fail(absl::UnavailableError("connection reset"));
  // The leg that failed has ended on its worker, and there is no room or prefill leg to abort.
  EXPECT_TRUE(book_.aborts.empty());
  EXPECT_FALSE(out.status.has_value());
  clock_.Advance(std::chrono::milliseconds(500));
  legs = book_.Named("r-retry1");
  ASSERT_EQ(legs.size(), 1u);               // decided anew: still short, still local
  EXPECT_NE(legs[0].worker, first_worker);  // the failed worker is out of rotation
  EXPECT_EQ(Decisions("local_short"), 2);
  legs[0].leg->Answer();
  ASSERT_TRUE(out.status.has_value());
  EXPECT_TRUE(out.status->ok()) << *out.status;

  // A client that goes away aborts the local leg by rid on its decode worker; no room anywhere.
  Outcome gone;
  std::shared_ptr<DispatchRun> run = Start("g", 8, &gone);
  legs = book_.Named("g");
  ASSERT_EQ(legs.size(), 1u);
  run->Cancel();
  EXPECT_TRUE(book_.RidAborted(legs[0].worker, "g"));
  EXPECT_EQ(legs[0].leg->cancel_calls_, 1);
  for (const LegBook::Abort& abort : book_.aborts) EXPECT_EQ(abort.request.bootstrap_room(), 0u);
  ASSERT_TRUE(gone.status.has_value());
  EXPECT_TRUE(absl::IsCancelled(*gone.status));
}

TEST_F(ConditionalDisaggregationTest, ADecodeWorkerThatRefusesToPrefillGetsThePromptAsKv) {
  DisaggregationOptions o;
  o.local_prefill_max_tokens = 16;
  SetUpCluster(o);
  Outcome out;
  Start("r", 8, &out);
  std::vector<LegBook::Started> legs = book_.Named("r");
  ASSERT_EQ(legs.size(), 1u);
  legs[0].leg->Fail(absl::FailedPreconditionError("runs with --allow-local-prefill=false"));
  EXPECT_FALSE(out.status.has_value());  // not the caller's error: tried again
  clock_.RunDue();                       // at once, without a backoff
  legs = book_.Named("r-retry1");
  ASSERT_EQ(legs.size(), 2u);  // as a pair, whatever the prompt's length
  EXPECT_TRUE(legs[0].prefill);
  EXPECT_EQ(Decisions("pd"), 1);
  EXPECT_EQ(Decisions("local_short"), 1);
  legs[0].leg->Answer();
  legs[1].leg->Answer();
  ASSERT_TRUE(out.status.has_value());
  EXPECT_TRUE(out.status->ok()) << *out.status;
  // A PD attempt's FAILED_PRECONDITION is still the caller's error.
  Outcome bad;
  Start("bad", 40, &bad);
  book_.Decode("bad")->Fail(absl::FailedPreconditionError("bad request"));
  ASSERT_TRUE(bad.status.has_value());
  EXPECT_EQ(bad.status->code(), absl::StatusCode::kFailedPrecondition) << *bad.status;
}

}  // namespace
}  // namespace tandem::router
