// Internal to kvtransfer/tcp: the TcpEngine class that CreateTcpEngine (tcp_engine.h) returns,
// and the records its I/O thread keeps per peer and per batch. Callers outside use tcp_engine.h.
//
// The class is defined in two files along its thread boundary: tcp_engine.cc holds the public
// methods, which run on the callers' threads, check their arguments and hand Commands to the
// I/O thread; tcp_engine_io.cc holds the I/O thread, which owns every socket after Start().
// Fields under `mu_` are shared by both; the fields marked "I/O thread" are touched by it alone.
#ifndef TANDEM_KVTRANSFER_TCP_TCP_ENGINE_INTERNAL_H_
#define TANDEM_KVTRANSFER_TCP_TCP_ENGINE_INTERNAL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kvtransfer/batch_plan.h"
#include "kvtransfer/batch_tracker.h"
#include "kvtransfer/counters.h"
#include "kvtransfer/descriptor.h"
#include "kvtransfer/region_table.h"
#include "kvtransfer/tcp/tcp_client.h"
#include "kvtransfer/tcp/tcp_server.h"
#include "kvtransfer/transfer_engine.h"

namespace tandem::kv::tcp_internal {

// One slice waiting for its lane (I/O thread). A flush replaces the remaining slices of a batch
// that ended (cancelled, timed out) after some of its slices were sent on this lane.
struct QueuedSlice {
  BatchId batch;
  RegionId region;
  uint64_t remote_offset;
  const uint8_t* data;
  uint64_t length;
  bool last_on_lane;
};

// Sender-side record of a running batch (I/O thread).
struct TxBatch {
  PeerId peer = 0;
  uint64_t seq = 0;  // submission order within the peer
  int lanes_unsettled = 0;
  std::vector<uint64_t> lane_bytes;
  std::vector<bool> lane_sent;
  std::vector<bool> lane_settled;
};

struct PendingNotify {
  BatchId id;
  uint64_t seq;  // sent once every batch with a smaller seq is settled
  std::string message;
};

struct Peer {
  PeerId id = 0;
  Descriptor desc;
  std::vector<ClientLane> lanes;
  std::vector<std::deque<QueuedSlice>> queues;
  std::set<uint64_t> unsettled;  // seqs of batches whose lanes have not all settled
  std::deque<PendingNotify> notifies;
  bool dead = false;
};

// Work handed from API threads to the I/O thread.
struct Command {
  enum Kind { kAddPeer, kSubmit, kNotify, kRemovePeer } kind;
  PeerId peer = 0;
  std::unique_ptr<Peer> new_peer;
  BatchId batch = 0;
  std::vector<PlannedSlice> slices;
  std::string message;
};

class TcpEngine final : public TransferEngine {
 public:
  explicit TcpEngine(EngineOptions options);
  ~TcpEngine() override;

  EngineState state() const override;
  EngineStats stats() const override;

  absl::Status RegisterRegion(const LocalRegion& region) override;
  absl::Status Start() override;
  absl::StatusOr<std::string> ExportDescriptor() override;
  absl::StatusOr<PeerId> ImportPeer(const std::string& descriptor) override;
  absl::Status RemovePeer(PeerId peer) override;
  absl::Status CheckPeer(PeerId peer) const override;

  absl::StatusOr<WindowId> OpenWindow(const std::string& peer_name, RegionId region,
                                      uint64_t offset, uint64_t length) override;
  absl::Status CloseWindow(WindowId window) override;

  absl::StatusOr<SubmitResult> Submit(PeerId peer, absl::Span<const WriteOp> ops,
                                      SubmitOptions options) override;
  absl::StatusOr<BatchId> Notify(PeerId peer, const std::string& message,
                                 SubmitOptions options) override;

  absl::StatusOr<BatchStatus> Poll(BatchId id) override;
  absl::StatusOr<BatchStatus> Wait(BatchId id, absl::Time until) override;
  absl::Status Cancel(BatchId id) override;
  absl::Status Release(BatchId id) override;

  void Shutdown() override;

 private:
  struct PeerMeta {
    Descriptor desc;
    bool dead = false;
    uint64_t queued_bytes = 0;
    int lanes = 1;
    int next_lane = 0;
    std::string death;
  };

  int HeartbeatMs() const;
  absl::Status CheckPeerLocked(PeerId peer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Wake();

  // ---- I/O thread ----
  void Run();
  void TakeCommands();
  void ReadServer();
  void ReadLane(Peer& p, int lane);
  void ReadMonitor(Peer& p, int lane);
  void PumpLane(Peer& p, int lane);
  void PumpNotifies(Peer& p);
  // Sends the lane's leading small slices of one batch as one kWriteMulti frame; false if the
  // lane is full.
  bool SendPacked(Peer& p, int lane, TxBatch& tx);
  void SettleLane(BatchId id, int lane, bool acked);
  void KillPeer(Peer& p, const std::string& why);
  void ClosePeer(Peer& p);
  void DequeuedBytes(PeerId peer, uint64_t n);

  const EngineOptions options_;
  RegionTable regions_;
  BatchTracker tracker_;
  EngineCounters counters_;
  zmq::context_t ctx_;
  zmq::socket_t router_;  // I/O thread after Start()
  TcpServer server_;      // I/O thread
  std::string endpoint_;  // set in Start()
  int wake_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread io_thread_;

  mutable absl::Mutex mu_;
  EngineState state_ ABSL_GUARDED_BY(mu_) = EngineState::kConfiguring;
  PeerId next_peer_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<PeerId, PeerMeta> meta_ ABSL_GUARDED_BY(mu_);
  std::vector<Command> commands_ ABSL_GUARDED_BY(mu_);

  // I/O thread only.
  std::map<PeerId, std::unique_ptr<Peer>> peers_;
  std::map<BatchId, TxBatch> tx_;
  uint64_t seq_counter_ = 0;
};

}  // namespace tandem::kv::tcp_internal

#endif  // TANDEM_KVTRANSFER_TCP_TCP_ENGINE_INTERNAL_H_
