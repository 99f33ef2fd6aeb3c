#include "kvtransfer/fake/fake_engine.h"

#include <cstring>
#include <deque>
#include <map>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kvtransfer/auth.h"
#include "kvtransfer/batch_tracker.h"
#include "kvtransfer/counters.h"
#include "kvtransfer/region_table.h"

namespace tandem::kv {
namespace {

constexpr char kScheme[] = "fake://";

class FakeEngine;

// Process-wide name -> engine map. Held while a write is applied so that the destination
// cannot be destroyed under the copy.
absl::Mutex& RegistryMu() {
  static absl::Mutex mu;
  return mu;
}
std::map<std::string, FakeEngine*>& Registry() ABSL_EXCLUSIVE_LOCKS_REQUIRED(RegistryMu()) {
  static auto* registry = new std::map<std::string, FakeEngine*>();
  return *registry;
}

class FakeEngine final : public TransferEngine {
 public:
  explicit FakeEngine(EngineOptions options) : options_(std::move(options)) {}
  ~FakeEngine() override { Shutdown(); }

  EngineStats stats() const override { return counters_.Snapshot(); }

  EngineState state() const override {
    absl::MutexLock lock(&mu_);
    return state_;
  }

  absl::Status RegisterRegion(const LocalRegion& region) override {
    absl::MutexLock lock(&mu_);
    if (state_ != EngineState::kConfiguring) {
      return absl::FailedPreconditionError("fake: regions are registered before Start()");
    }
    return regions_.Add(region);
  }

  absl::Status Start() override {
    {
      absl::MutexLock lock(&mu_);
      if (state_ != EngineState::kConfiguring) {
        return absl::FailedPreconditionError("fake: Start() called twice");
      }
      absl::MutexLock reg(&RegistryMu());
      if (!Registry().emplace(options_.name, this).second) {
        return absl::AlreadyExistsError(
            absl::StrCat("fake: an engine named '", options_.name, "' already exists"));
      }
      regions_.Freeze();
      state_ = EngineState::kServing;
    }
    worker_ = std::thread([this] { Run(); });
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> ExportDescriptor() override {
    if (state() != EngineState::kServing) {
      return absl::FailedPreconditionError("fake: ExportDescriptor() before Start()");
    }
    Descriptor d;
    d.backend = "fake";
    d.engine_name = options_.name;
    d.endpoints.push_back(absl::StrCat(kScheme, options_.name));
    for (const LocalRegion& r : regions_.regions()) {
      d.regions.push_back(RegionInfo{r.id, r.size, r.restricted, 0, 0});
    }
    d.compat = options_.compat;
    return EncodeDescriptor(d);
  }

  absl::StatusOr<PeerId> ImportPeer(const std::string& descriptor) override {
    if (state() != EngineState::kServing) {
      return absl::FailedPreconditionError("fake: ImportPeer() before Start()");
    }
    ASSIGN_OR_RETURN(Descriptor d, DecodePeerDescriptor("fake", descriptor, options_.compat));
    if (d.endpoints.size() != 1 || !absl::StartsWith(d.endpoints[0], kScheme)) {
      return absl::InvalidArgumentError(
          absl::StrCat("fake: descriptor endpoint '", d.endpoints[0], "' is not a fake endpoint"));
    }
    {
      absl::MutexLock reg(&RegistryMu());
      auto it = Registry().find(d.engine_name);
      if (it == Registry().end()) {
        return absl::UnavailableError(absl::StrCat("fake: no engine named '", d.engine_name, "'"));
      }
      // The same proofs the network backends exchange, computed with each side's secret.
      const std::string cn = MakeNonce(), sn = MakeNonce();
      if (!ProofEquals(ComputeProof(options_.cluster_secret, AuthRole::kClient, cn, sn,
                                    options_.name, d.engine_name),
                       ComputeProof(it->second->options_.cluster_secret, AuthRole::kClient, cn, sn,
                                    options_.name, d.engine_name))) {
        return absl::PermissionDeniedError(absl::StrCat(
            "fake: peer '", d.engine_name, "' rejected the handshake: cluster secret mismatch"));
      }
    }
    absl::MutexLock lock(&mu_);
    PeerId id = next_peer_++;
    peers_[id] = std::move(d);
    return id;
  }

  absl::Status RemovePeer(PeerId peer) override {
    {
      absl::MutexLock lock(&mu_);
      if (peers_.erase(peer) == 0) return absl::NotFoundError(absl::StrCat("no peer ", peer));
    }
    tracker_.FailPeer(peer, absl::CancelledError("peer removed"));
    return absl::OkStatus();
  }

  absl::Status CheckPeer(PeerId peer) const override {
    absl::MutexLock lock(&mu_);
    if (peers_.count(peer) == 0) return absl::NotFoundError(absl::StrCat("fake: no peer ", peer));
    return absl::OkStatus();
  }

  absl::StatusOr<WindowId> OpenWindow(const std::string& peer_name, RegionId region,
                                      uint64_t offset, uint64_t length) override {
    return regions_.OpenWindow(peer_name, region, offset, length);
  }
  absl::Status CloseWindow(WindowId window) override { return regions_.CloseWindow(window); }

  absl::StatusOr<SubmitResult> Submit(PeerId peer, absl::Span<const WriteOp> ops,
                                      SubmitOptions options) override {
    if (ops.empty()) return absl::InvalidArgumentError("fake: empty batch");
    absl::MutexLock lock(&mu_);
    if (state_ != EngineState::kServing) return absl::FailedPreconditionError("fake: not serving");
    auto it = peers_.find(peer);
    if (it == peers_.end()) return absl::NotFoundError(absl::StrCat("fake: no peer ", peer));
    uint64_t total = 0;
    for (const WriteOp& op : ops) {
      RETURN_IF_ERROR(regions_.LocalRange(op.local_region, op.local_offset, op.length).status(),
                      "fake: ");
      const RegionInfo* remote = it->second.FindRegion(op.remote_region);
      if (remote == nullptr || !RangeInside(op.remote_offset, op.length, remote->size)) {
        return absl::InvalidArgumentError(absl::StrCat("fake: remote range [", op.remote_offset,
                                                       ", +", op.length, ") of region ",
                                                       op.remote_region, " outside the peer's"));
      }
      total += op.length;
    }
    if (queued_bytes_ > 0 && queued_bytes_ + total > options_.max_queued_bytes_per_peer) {
      return SubmitResult{};
    }
    BatchId id = tracker_.Create(peer, total, std::move(options));
    queued_bytes_ += total;
    queue_.push_back(Item{id, it->second.engine_name, {ops.begin(), ops.end()}, false, ""});
    return SubmitResult{true, id};
  }

  absl::StatusOr<BatchId> Notify(PeerId peer, const std::string& message,
                                 SubmitOptions options) override {
    if (message.size() > kMaxNotifyBytes) {
      return absl::InvalidArgumentError("fake: notification larger than kMaxNotifyBytes");
    }
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(peer);
    if (it == peers_.end()) return absl::NotFoundError(absl::StrCat("fake: no peer ", peer));
    BatchId id = tracker_.Create(peer, 0, std::move(options));
    queue_.push_back(Item{id, it->second.engine_name, {}, true, message});
    return id;
  }

  absl::StatusOr<BatchStatus> Poll(BatchId id) override { return tracker_.Poll(id); }
  absl::StatusOr<BatchStatus> Wait(BatchId id, absl::Time until) override {
    return tracker_.Wait(id, until);
  }
  absl::Status Cancel(BatchId id) override { return tracker_.Cancel(id).status(); }
  absl::Status Release(BatchId id) override { return tracker_.Release(id); }

  void Shutdown() override {
    {
      absl::MutexLock lock(&mu_);
      if (state_ == EngineState::kStopped) return;
      bool was_serving = state_ == EngineState::kServing;
      state_ = EngineState::kStopped;
      if (was_serving) {
        absl::MutexLock reg(&RegistryMu());
        Registry().erase(options_.name);
      }
    }
    if (worker_.joinable()) worker_.join();
    tracker_.FailPeer(0, absl::CancelledError("engine shut down"));
  }

 private:
  struct Item {
    BatchId id;
    std::string peer_name;
    std::vector<WriteOp> ops;
    bool is_notify;
    std::string message;
  };

  void Run() {
    while (true) {
      Item item;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return !queue_.empty() || state_ == EngineState::kStopped;
        };
        mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(20));
        if (state_ == EngineState::kStopped) return;
        if (queue_.empty()) {
          tracker_.ExpireDeadlines(absl::Now());
          continue;
        }
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      tracker_.ExpireDeadlines(absl::Now());
      uint64_t bytes = 0;
      for (const WriteOp& op : item.ops) bytes += op.length;
      Apply(item);
      absl::MutexLock lock(&mu_);
      queued_bytes_ -= bytes;
    }
  }

  void Apply(const Item& item) {
    if (tracker_.IsDone(item.id)) return;  // cancelled or timed out while queued
    tracker_.MarkInProgress(item.id);
    if (options_.fake_delay > absl::ZeroDuration()) absl::SleepFor(options_.fake_delay);
    if (!item.is_notify && options_.fake_fail_every > 0 &&
        ++batches_seen_ % options_.fake_fail_every == 0) {
      tracker_.Finish(item.id, BatchState::kFailed, absl::InternalError("fake: injected failure"));
      return;
    }
    NotificationHandler handler;
    {
      absl::MutexLock reg(&RegistryMu());
      auto it = Registry().find(item.peer_name);
      if (it == Registry().end()) {
        tracker_.Finish(
            item.id, BatchState::kFailed,
            absl::UnavailableError(absl::StrCat("fake: peer '", item.peer_name, "' is gone")));
        return;
      }
      FakeEngine* dst = it->second;
      for (const WriteOp& op : item.ops) {
        if (tracker_.IsDone(item.id)) return;
        auto to = dst->regions_.CheckIncomingWrite(options_.name, op.remote_region,
                                                   op.remote_offset, op.length);
        if (!to.ok()) {
          dst->counters_.writes_rejected++;
          tracker_.Finish(item.id, BatchState::kFailed,
                          Annotate(to.status(),
                                   absl::StrCat("peer '", item.peer_name, "' rejected a write: ")));
          return;
        }
        auto from = regions_.LocalRange(op.local_region, op.local_offset, op.length);
        std::memmove(*to, *from, op.length);
        dst->counters_.writes_applied++;
        dst->counters_.bytes_applied += op.length;
        tracker_.AddAcked(item.id, op.length);
      }
      handler = dst->options_.on_notification;
      if (item.is_notify) {
        dst->counters_.notifications_received++;
        if (handler) handler(options_.name, item.message);
      }
    }
    tracker_.Finish(item.id, BatchState::kCompleted);
  }

  const EngineOptions options_;
  RegionTable regions_;
  BatchTracker tracker_;
  EngineCounters counters_;
  mutable absl::Mutex mu_;
  EngineState state_ ABSL_GUARDED_BY(mu_) = EngineState::kConfiguring;
  PeerId next_peer_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<PeerId, Descriptor> peers_ ABSL_GUARDED_BY(mu_);
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t batches_seen_ = 0;  // worker thread only
  std::thread worker_;
};

}  // namespace

absl::StatusOr<TransferEnginePtr> CreateFakeEngine(EngineOptions options) {
  if (options.name.empty()) return absl::InvalidArgumentError("fake: engine name is empty");
  RETURN_IF_ERROR(ValidateClusterSecret(options.cluster_secret), "fake: ");
  return TransferEnginePtr(new FakeEngine(std::move(options)));
}

}  // namespace tandem::kv
