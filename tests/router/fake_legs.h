// In-memory legs for the dispatcher's unit tests: FakeLink (a worker's WorkerLegs) records every
// leg it starts and every abort in a LegBook, and FakeLeg lets the test end each leg (Emit,
// Answer, Fail) on the test thread; Cancel() ends a leg on the ManualClock's next RunDue/Advance.
// No sockets, no threads. Used by dispatcher_rules_test and conditional_disaggregation_test.
#ifndef TANDEM_TESTS_ROUTER_FAKE_LEGS_H_
#define TANDEM_TESTS_ROUTER_FAKE_LEGS_H_

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/manual_clock.h"
#include "proto/worker.pb.h"
#include "router/workers/leg.h"

namespace tandem::router::fakes {

// One leg a FakeLink started. The test ends it (Emit, Answer, Fail); Cancel() ends it CANCELLED
// on the clock's next RunDue/Advance, as a real transport ends it off the caller's frame.
class FakeLeg : public Leg, public std::enable_shared_from_this<FakeLeg> {
 public:
  FakeLeg(ManualClock* clock, std::string worker, LegEventFn on_event, LegDoneFn done,
          PrefillDoneFn prefill_done)
      : worker_(std::move(worker)),
        clock_(clock),
        on_event_(std::move(on_event)),
        done_(std::move(done)),
        prefill_done_(std::move(prefill_done)) {}

  void Cancel() override {
    cancel_calls_ += 1;
    if (state_ == LegState::kEnded) return;
    std::weak_ptr<FakeLeg> weak = weak_from_this();
    clock_->Post([weak] {
      if (auto leg = weak.lock()) leg->End(absl::CancelledError("cancelled"), {});
    });
  }
  LegState state() const override { return state_; }

  // A decode event that is not the last.
  void Emit(int token) {
    ASSERT_NE(state_, LegState::kEnded);
    state_ = LegState::kStreaming;
    proto::DecodeEvent e;
    e.add_token_ids(token);
    on_event_(e);
  }
  // The last decode event, or the prefill leg's answer; then OK.
  void Answer() {
    ASSERT_NE(state_, LegState::kEnded);
    if (on_event_) {
      proto::DecodeEvent e;
      e.add_token_ids(99);
      e.set_finished(true);
      e.mutable_finish_reason()->set_type(proto::FinishReason::LENGTH);
      on_event_(e);
    }
    proto::PrefillResponse r;
    r.set_first_token_id(99);
    End(absl::OkStatus(), r);
  }
  void Fail(absl::Status status) { End(std::move(status), {}); }

  const std::string worker_;
  int cancel_calls_ = 0;  // Cancel() calls, also those after the leg ended
  std::optional<absl::Status> status_;

 private:
  void End(absl::Status status, proto::PrefillResponse response) {
    if (state_ == LegState::kEnded) return;
    state_ = LegState::kEnded;
    status_ = status;
    // Let go of the callbacks (they hold the run) before calling them.
    auto done = std::move(done_);
    auto prefill_done = std::move(prefill_done_);
    on_event_ = nullptr;
    if (done) done(std::move(status));
    if (prefill_done) prefill_done(std::move(status), std::move(response));
  }

  ManualClock* const clock_;
  LegState state_ = LegState::kSent;
  LegEventFn on_event_;
  LegDoneFn done_;
  PrefillDoneFn prefill_done_;
};

// What every FakeLink saw, in order.
struct LegBook {
  struct Started {
    std::string worker;
    bool prefill = false;
    std::string rid;
    uint64_t room = 0;
    std::shared_ptr<FakeLeg> leg;
    std::string bootstrap_host;  // a decode leg's ("" for a plain or colocated leg)
  };
  struct Abort {
    std::string worker;
    proto::AbortRequest request;
  };
  std::vector<Started> legs;
  std::vector<Abort> aborts;

  std::vector<Started> Named(const std::string& rid) const {
    std::vector<Started> out;
    for (const Started& s : legs) {
      if (s.rid == rid) out.push_back(s);
    }
    return out;
  }
  std::shared_ptr<FakeLeg> Decode(const std::string& rid) const {
    for (const Started& s : legs) {
      if (s.rid == rid && !s.prefill) return s.leg;
    }
    return nullptr;
  }
  std::shared_ptr<FakeLeg> Prefill(const std::string& rid) const {
    for (const Started& s : legs) {
      if (s.rid == rid && s.prefill) return s.leg;
    }
    return nullptr;
  }
  bool RoomAborted(const std::string& worker, uint64_t room) const {
    for (const Abort& a : aborts) {
      if (a.worker == worker && a.request.bootstrap_room() == room) return true;
    }
    return false;
  }
  bool RidAborted(const std::string& worker, const std::string& rid) const {
    for (const Abort& a : aborts) {
      if (a.worker == worker && a.request.rid() == rid) return true;
    }
    return false;
  }
};

class FakeLink : public WorkerLegs {
 public:
  FakeLink(std::string url, LegBook* book, ManualClock* clock)
      : url_(std::move(url)), book_(book), clock_(clock) {}

  LegPtr StartPrefill(proto::PrefillRequest request, Deadline /*deadline*/,
                      PrefillDoneFn done) override {
    auto leg = std::make_shared<FakeLeg>(clock_, url_, nullptr, nullptr, std::move(done));
    book_->legs.push_back({url_, true, request.rid(), request.bootstrap_room(), leg});
    return leg;
  }
  LegPtr StartDecode(proto::DecodeRequest request, Deadline /*deadline*/, LegEventFn on_event,
                     LegDoneFn done) override {
    auto leg =
        std::make_shared<FakeLeg>(clock_, url_, std::move(on_event), std::move(done), nullptr);
    book_->legs.push_back(
        {url_, false, request.rid(), request.bootstrap_room(), leg, request.bootstrap_host()});
    return leg;
  }
  void AbortLegs(proto::AbortRequest request, Deadline /*deadline*/) override {
    book_->aborts.push_back({url_, std::move(request)});
  }

 private:
  const std::string url_;
  LegBook* const book_;
  ManualClock* const clock_;
};

}  // namespace tandem::router::fakes

#endif  // TANDEM_TESTS_ROUTER_FAKE_LEGS_H_
