// What the session tests of both transports (rpc Session and the session socket) share:
// ScriptedLegs, worker::LegHandler whose behaviour each leg's rid picks, and decode legs
// started through a WorkerClient and waited for (at most kWait).
#ifndef TANDEM_TESTS_ROUTER_WORKERS_SESSION_TEST_SUPPORT_H_
#define TANDEM_TESTS_ROUTER_WORKERS_SESSION_TEST_SUPPORT_H_

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"
#include "router/workers/worker_client.h"
#include "worker/session_server.h"

namespace tandem::router {

constexpr absl::Duration kWait = absl::Seconds(20);

// Legs scripted by rid: "ok:N" sends N events (the last finished); "err" fails to start with
// INVALID_ARGUMENT; "hold" starts and waits for a cancel (then ends with an abort event) or
// Release(). Prefill: "ok" answers first_token_id 7, "err" fails FAILED_PRECONDITION, "hold"
// waits for CancelPrefill (then fails ABORTED).
class ScriptedLegs : public worker::LegHandler {
 public:
  absl::StatusOr<std::function<void()>> StartDecode(
      const proto::DecodeRequest& request, std::function<void(proto::DecodeEvent)> sink) override {
    const std::string& rid = request.rid();
    if (rid == "err") return absl::InvalidArgumentError("input_ids: empty prompt");
    int n = 0;
    if (absl::StartsWith(rid, "ok:") && absl::SimpleAtoi(rid.substr(3), &n)) {
      for (int i = 0; i < n; ++i) {
        proto::DecodeEvent e;
        e.add_token_ids(100 + i);
        e.set_finished(i == n - 1);
        sink(std::move(e));
      }
      return [] {};
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_[rid] = sink;
    }
    held_count_.fetch_add(1);
    return [this, rid] {
      decode_cancels_.fetch_add(1);
      End(rid, proto::FinishReason::ABORT);
    };
  }

  void StartPrefill(const proto::PrefillRequest& request,
                    std::function<void(absl::StatusOr<proto::PrefillResponse>)> done) override {
    if (request.rid() == "ok") {
      proto::PrefillResponse r;
      r.set_bootstrap_room(request.bootstrap_room());
      r.set_first_token_id(7);
      done(r);
    } else if (request.rid() == "err") {
      done(absl::FailedPreconditionError("not a prefill worker"));
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      prefills_[request.bootstrap_room()] = std::move(done);
    }
  }

  void CancelPrefill(uint64_t room) override {
    std::function<void(absl::StatusOr<proto::PrefillResponse>)> done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = prefills_.find(room);
      if (it == prefills_.end()) return;
      done = std::move(it->second);
      prefills_.erase(it);
    }
    prefill_cancels_.fetch_add(1);
    done(absl::AbortedError("cancelled"));
  }

  // Ends a held decode leg normally.
  void Release(const std::string& rid) { End(rid, proto::FinishReason::LENGTH); }

  int held_count() const { return held_count_.load(); }
  int decode_cancels() const { return decode_cancels_.load(); }
  int prefill_cancels() const { return prefill_cancels_.load(); }
  int live_holds() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(held_.size() + prefills_.size());
  }

 private:
  void End(const std::string& rid, proto::FinishReason::Type type) {
    std::function<void(proto::DecodeEvent)> sink;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = held_.find(rid);
      if (it == held_.end()) return;
      sink = std::move(it->second);
      held_.erase(it);
    }
    proto::DecodeEvent e;
    e.set_finished(true);
    e.mutable_finish_reason()->set_type(type);
    sink(std::move(e));
  }

  std::mutex mu_;
  std::map<std::string, std::function<void(proto::DecodeEvent)>> held_;
  std::map<uint64_t, std::function<void(absl::StatusOr<proto::PrefillResponse>)>> prefills_;
  std::atomic<int> held_count_{0};
  std::atomic<int> decode_cancels_{0};
  std::atomic<int> prefill_cancels_{0};
};

// One decode leg's outcome.
struct DecodeResult {
  std::vector<proto::DecodeEvent> events;
  absl::Status status;
};
// A leg's deadline from a wall-clock time the test computed (InfiniteFuture: none).
inline Deadline LegDeadline(absl::Time when) {
  if (when == absl::InfiniteFuture()) return Deadline::Never();
  return Deadline::After(absl::ToChronoNanoseconds(when - absl::Now()));
}

struct DecodeWatch {
  std::mutex mu;
  std::vector<proto::DecodeEvent> events;
  std::promise<DecodeResult> promise;
  std::atomic<int> done_calls{0};
};

inline LegPtr StartDecode(WorkerClient& client, const std::string& rid, absl::Time deadline,
                          const std::shared_ptr<DecodeWatch>& watch) {
  proto::DecodeRequest request;
  request.set_rid(rid);
  request.add_input_ids(1);
  request.set_stream(true);
  return client.StartDecode(
      std::move(request), LegDeadline(deadline),
      [watch](const proto::DecodeEvent& e) {
        std::lock_guard<std::mutex> lock(watch->mu);
        watch->events.push_back(e);
      },
      [watch](absl::Status s) {
        if (watch->done_calls.fetch_add(1) != 0) return;  // counted; callers check done_calls == 1
        std::lock_guard<std::mutex> lock(watch->mu);
        watch->promise.set_value(DecodeResult{watch->events, std::move(s)});
      });
}

inline DecodeResult Wait(const std::shared_ptr<DecodeWatch>& watch) {
  auto future = watch->promise.get_future();
  if (future.wait_for(absl::ToChronoSeconds(kWait)) != std::future_status::ready) {
    ADD_FAILURE() << "the leg did not end within " << kWait;
    return DecodeResult{{}, absl::UnknownError("timed out in the test")};
  }
  return future.get();
}

// Starts `legs` decode legs at once ("ok:1".."ok:4" in turn) and expects each to end OK with its
// events, in order, and `done` once.
inline void ExpectConcurrentLegsServed(WorkerClient& client, int legs) {
  std::vector<std::shared_ptr<DecodeWatch>> watches;
  for (int i = 0; i < legs; ++i) {
    watches.push_back(std::make_shared<DecodeWatch>());
    StartDecode(client, absl::StrCat("ok:", 1 + i % 4), absl::Now() + kWait, watches.back());
  }
  for (int i = 0; i < legs; ++i) {
    DecodeResult r = Wait(watches[i]);
    EXPECT_TRUE(r.status.ok()) << i << ": " << r.status;
    ASSERT_EQ(static_cast<int>(r.events.size()), 1 + i % 4) << i;
    for (int k = 0; k < 1 + i % 4; ++k) EXPECT_EQ(r.events[k].token_ids(0), 100 + k);
    EXPECT_EQ(watches[i]->done_calls.load(), 1);
  }
}

inline bool WaitFor(const std::function<bool()>& condition) {
  const absl::Time give_up = absl::Now() + kWait;
  while (absl::Now() < give_up) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return condition();
}

}  // namespace tandem::router

#endif  // TANDEM_TESTS_ROUTER_WORKERS_SESSION_TEST_SUPPORT_H_
