// Internal to kvtransfer/rdma: the RdmaEngine class that CreateRdmaEngine (rdma_engine.h)
// returns. Callers outside use rdma_engine.h.
//
// The class is defined in two files along its thread boundary. rdma_engine.cc holds the public
// methods, which run on the callers' threads (ImportPeer runs the queue-pair exchange there),
// and the control thread, which answers peers' queue-pair exchanges. rdma_engine_completion.cc
// holds the polling thread, which drains the completion queue, settles batches, re-arms receive
// buffers and posts notifications, together with the helpers that fail a peer (KillPeerLocked)
// and report outcomes to the tracker (Apply), which Submit and RemovePeer use too.
// Fields under `mu_` are shared by all threads; the rest are set in Start() or owned by the
// thread named beside them.
#ifndef TANDEM_KVTRANSFER_RDMA_RDMA_ENGINE_INTERNAL_H_
#define TANDEM_KVTRANSFER_RDMA_RDMA_ENGINE_INTERNAL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kvtransfer/batch_tracker.h"
#include "kvtransfer/counters.h"
#include "kvtransfer/descriptor.h"
#include "kvtransfer/rdma/verbs.h"
#include "kvtransfer/region_table.h"
#include "kvtransfer/tcp/tcp_server.h"
#include "kvtransfer/transfer_engine.h"

namespace tandem::kv::rdma_internal {

using rdma::QpAddress;
using rdma::SendRequest;
using rdma::WcOpcode;
using rdma::WcStatus;
using rdma::WorkCompletion;

class RdmaEngine final : public TransferEngine {
 public:
  RdmaEngine(EngineOptions options, rdma::VerbsPtr verbs)
      : options_(std::move(options)),
        verbs_(std::move(verbs)),
        ctx_(1),
        server_(options_, &regions_, &counters_,
                [this](const std::string& peer, const std::string& body) {
                  return OnQpRequest(peer, body);
                }) {}
  ~RdmaEngine() override { Shutdown(); }

  EngineState state() const override {
    absl::MutexLock lock(&mu_);
    return state_;
  }
  EngineStats stats() const override { return counters_.Snapshot(); }

  absl::Status RegisterRegion(const LocalRegion& region) override {
    if (region.restricted) {
      return absl::UnimplementedError(
          "rdma: restricted regions (per-peer windows) are not offered by the rdma backend; "
          "the receiver does not see one-sided writes. Use the tcp backend for windows");
    }
    absl::MutexLock lock(&mu_);
    if (state_ != EngineState::kConfiguring) {
      return absl::FailedPreconditionError("rdma: regions are registered before Start()");
    }
    return regions_.Add(region);
  }

  absl::Status Start() override;
  absl::StatusOr<std::string> ExportDescriptor() override;
  absl::StatusOr<PeerId> ImportPeer(const std::string& descriptor) override;
  absl::Status RemovePeer(PeerId peer) override;
  absl::Status CheckPeer(PeerId peer) const override;
  absl::StatusOr<WindowId> OpenWindow(const std::string&, RegionId, uint64_t, uint64_t) override {
    return absl::UnimplementedError("rdma: windows are not offered by the rdma backend");
  }
  absl::Status CloseWindow(WindowId) override {
    return absl::UnimplementedError("rdma: windows are not offered by the rdma backend");
  }
  absl::StatusOr<SubmitResult> Submit(PeerId peer, absl::Span<const WriteOp> ops,
                                      SubmitOptions options) override;
  absl::StatusOr<BatchId> Notify(PeerId peer, const std::string& message,
                                 SubmitOptions options) override;
  absl::StatusOr<BatchStatus> Poll(BatchId id) override { return tracker_.Poll(id); }
  absl::StatusOr<BatchStatus> Wait(BatchId id, absl::Time until) override {
    return tracker_.Wait(id, until);
  }
  // Posted work requests cannot be recalled: the batch is reported cancelled at once, and its
  // chains still settle (for notification ordering) when their completions arrive.
  absl::Status Cancel(BatchId id) override { return tracker_.Cancel(id).status(); }
  absl::Status Release(BatchId id) override { return tracker_.Release(id); }
  void Shutdown() override;

 private:
  struct PendingNotify {
    BatchId id;
    uint64_t seq;
    std::string message;
  };
  struct OutPeer {
    Descriptor desc;
    std::vector<rdma::QueuePair> qps;
    std::vector<int> inflight_wrs;
    std::set<uint64_t> unsettled;
    std::deque<PendingNotify> notifies;
    bool dead = false;
    std::string death;
    int next_lane = 0;
  };
  struct TxBatch {
    PeerId peer;
    uint64_t seq;
    std::map<int, std::pair<int, uint64_t>> chains;  // lane -> (work requests, bytes)
  };
  struct InConn {
    std::string peer;
    std::vector<rdma::QueuePair> qps;
  };
  // What the poller does after dropping the lock (callbacks may re-enter the engine).
  // Exactly one of: a batch update (id != 0), a peer failure (fail_peer != 0), a notification.
  struct Outcome {
    BatchId id = 0;
    BatchState state = BatchState::kInProgress;
    absl::Status error;
    uint64_t acked = 0;
    PeerId fail_peer = 0;
    std::string note_peer, note;
  };

  // ---- rdma_engine.cc ----
  absl::StatusOr<SubmitResult> DoSubmit(PeerId peer, absl::Span<const WriteOp> ops, uint64_t total,
                                        SubmitOptions options, std::vector<Outcome>& out);
  // Control thread.
  absl::StatusOr<std::string> OnQpRequest(const std::string& peer, const std::string& body);
  void ControlLoop();

  // ---- rdma_engine_completion.cc: the polling thread, and settling used by all threads ----
  void PollLoop();
  void HandleCompletion(const WorkCompletion& wc, std::vector<Outcome>& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void KillPeerLocked(PeerId id, const std::string& why, std::vector<Outcome>& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PumpNotifiesLocked(PeerId id, OutPeer& p, std::vector<Outcome>& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Apply(std::vector<Outcome>& out);

  QpAddress AddressOf(const rdma::QueuePair& qp, uint32_t psn) const {
    return QpAddress{qp.qp_num, psn, port_.lid, port_.gid, port_.active_mtu};
  }
  uint8_t* Scratch(int slot) { return scratch_.data() + slot * kMaxNotifyBytes; }

  const EngineOptions options_;
  rdma::VerbsPtr verbs_;
  RegionTable regions_;
  BatchTracker tracker_;
  EngineCounters counters_;
  zmq::context_t ctx_;
  zmq::socket_t router_;  // control thread after Start()
  TcpServer server_;      // control thread
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread control_thread_, poll_thread_;

  // Set in Start(), read-only afterwards.
  rdma::PortInfo port_;
  rdma::Handle pd_ = 0, cq_ = 0;
  std::map<RegionId, rdma::MemoryRegistration> mrs_;
  std::vector<uint8_t> scratch_;  // kSendSlots + kRecvSlots notification buffers (rdma_engine.cc)
  rdma::MemoryRegistration scratch_mr_;

  mutable absl::Mutex mu_;
  EngineState state_ ABSL_GUARDED_BY(mu_) = EngineState::kConfiguring;
  PeerId next_peer_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<PeerId, OutPeer> peers_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, PeerId> qp_owner_ ABSL_GUARDED_BY(mu_);  // our outgoing qp_num -> peer
  std::map<BatchId, TxBatch> tx_ ABSL_GUARDED_BY(mu_);
  std::vector<int> free_send_slots_ ABSL_GUARDED_BY(mu_);
  std::vector<int> free_recv_slots_ ABSL_GUARDED_BY(mu_);
  std::vector<InConn> incoming_ ABSL_GUARDED_BY(mu_);
  // incoming qp_num -> (peer name, qp handle)
  std::map<uint32_t, std::pair<std::string, rdma::Handle>> incoming_qp_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::kv::rdma_internal

#endif  // TANDEM_KVTRANSFER_RDMA_RDMA_ENGINE_INTERNAL_H_
