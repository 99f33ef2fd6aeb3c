// The worker's end of a router link: prefill and decode legs multiplexed on one long-lived
// connection from the router (proto/worker.proto: rpc Session, or the session socket), started
// through a LegHandler. RouterLink is transport-neutral (absl::Status, no gRPC type); its
// transports are worker/grpc_link.h (rpc Session) and worker/session_socket.h (LinkSocketServer).
// The names mirror the router's (router/workers/worker_session.h: WorkerLink carries legs to one
// worker); the leg interface is LegHandler rather than WorkerLegs, which is the router's view of
// a worker's legs (router/workers/leg.h).
//
//   class MyLegs : public LegHandler { ... };
//   // in the Worker service's Session(...):  return ServeGrpcLink(&links_, &legs_);
//   ...
//   links_.CloseAll();   // before the gRPC server's Shutdown: open links end at once
//
// Replies are batched: whatever legs produce while a write is in flight goes out in the next
// SessionDown, so one write serves many legs under load. A link that ends for any reason
// (the router closed or cancelled it, the connection broke, CloseAll) cancels its live legs;
// their last replies are dropped.
//
// Thread-safety: thread-safe. LegHandler callbacks may run on any thread, also inline.
#ifndef TANDEM_WORKER_SESSION_SERVER_H_
#define TANDEM_WORKER_SESSION_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/worker.pb.h"

namespace tandem::worker {

// What a link starts its legs through (the worker core, or a benchmark's stand-in).
class LegHandler {
 public:
  virtual ~LegHandler() = default;
  // Starts a decode leg. On success `sink` gets every event, the last with `finished` set, and
  // the returned closure cancels the leg (its last event still comes). On error `sink` is never
  // called.
  virtual absl::StatusOr<std::function<void()>> StartDecode(
      const proto::DecodeRequest& request, std::function<void(proto::DecodeEvent)> sink) = 0;
  // Starts a prefill leg; `done` runs exactly once, with the answer or the leg's error.
  virtual void StartPrefill(const proto::PrefillRequest& request,
                            std::function<void(absl::StatusOr<proto::PrefillResponse>)> done) = 0;
  // The router gave up on the prefill leg of `room`: fail it (its `done` still runs).
  virtual void CancelPrefill(uint64_t room) = 0;
};

class LinkServer;

// One router link's legs and reply batching, whatever carries its messages (a gRPC Session call:
// worker/grpc_link.h, or the session socket: worker/session_socket.h). The transport hands it each
// SessionUp (Handle), writes the batches it asks for (WriteBatch, then Written), and finishes once
// told (Close). Deletes itself when the last reference goes: the transport holds one until it is
// done, and every live leg holds one until its last reply.
class RouterLink {
 public:
  RouterLink(LinkServer* server, LegHandler* legs) : server_(server), legs_(legs) {}
  RouterLink(const RouterLink&) = delete;
  RouterLink& operator=(const RouterLink&) = delete;

  // Starts (or cancels) the legs `up` carries. Ignored once the link has ended.
  void Handle(const proto::SessionUp& up);
  // The write WriteBatch started completed (`ok`: the peer has it).
  void Written(bool ok);
  // The link is over: no new legs, live legs cancelled, Close(status) once no write is in
  // flight. Idempotent.
  void End(absl::Status status);
  bool ended();

  void Ref() { refs_.fetch_add(1); }
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

 protected:
  virtual ~RouterLink() = default;
  // Starts writing `batch` (owned by the core until Written); Written follows, on any thread.
  virtual void WriteBatch(const proto::SessionDown* batch) = 0;
  // No write is in flight and none will start: end the transport with `status`. Called once.
  virtual void Close(const absl::Status& status) = 0;
  // The transport is done with the core: it leaves its LinkServer.
  void Forget();

 private:
  void HandleCall(const proto::SessionCall& call);
  bool Admit(uint64_t id, std::function<void()> cancel);
  void StartDecode(uint64_t id, const proto::DecodeRequest& request);
  void StartPrefill(uint64_t id, const proto::PrefillRequest& request);
  void OnEvent(uint64_t id, proto::DecodeEvent event);
  template <typename Fill>
  void Reply(uint64_t id, Fill fill);
  template <typename Fill>
  void AppendLocked(uint64_t id, Fill&& fill);
  void WriteIfIdleLocked();
  void FlushWrite();

  LinkServer* const server_;
  LegHandler* const legs_;
  std::atomic<int> refs_{1};  // the transport + one per live leg
  std::mutex mu_;
  std::unordered_map<uint64_t, std::function<void()>> live_ ABSL_GUARDED_BY(mu_);  // id -> cancel
  proto::SessionDown pending_ ABSL_GUARDED_BY(mu_);  // replies waiting for the next write
  proto::SessionDown in_flight_;  // the write in flight (owned by it while writing_)
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool start_write_ ABSL_GUARDED_BY(mu_) = false;  // in_flight_ is filled, WriteBatch is due
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool close_called_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status end_status_;  // set once, with ended_
};

// The open router links of one worker, over either transport.
class LinkServer {
 public:
  LinkServer() = default;
  ~LinkServer();
  LinkServer(const LinkServer&) = delete;
  LinkServer& operator=(const LinkServer&) = delete;

  // Registers a link a transport opened (ended at once when the server is closed).
  void Add(RouterLink* link);
  // Ends every open link (cancelling its legs) and every link opened from now on.
  void CloseAll();

 private:
  friend class RouterLink;
  void Forget(RouterLink* link);

  std::mutex mu_;
  std::unordered_set<RouterLink*> open_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_SESSION_SERVER_H_
