// The server side of rpc Session (proto/worker.proto): prefill and decode legs multiplexed on one
// long-lived stream from the router, answered through a SessionLegs. The same SessionCore also
// serves the session socket (worker/session_socket.h).
//
//   class MyLegs : public SessionLegs { ... };
//   grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown>* Session(...) override {
//     return sessions_.Open(&legs_);
//   }
//   ...
//   sessions_.CloseAll();   // before grpc::Server::Shutdown: open sessions end at once
//
// Replies are batched: whatever legs produce while a write is in flight goes out in the next
// SessionDown, so one write serves many legs under load. A session that ends for any reason
// (the router closed or cancelled it, the connection broke, CloseAll) cancels its live legs;
// their last replies are dropped.
//
// Thread-safety: thread-safe. SessionLegs callbacks may run on any thread, also inline.
#ifndef TANDEM_WORKER_SESSION_SERVER_H_
#define TANDEM_WORKER_SESSION_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "proto/worker.pb.h"

namespace tandem::worker {

// What a session runs its legs on (the worker core, or a benchmark's stand-in).
class SessionLegs {
 public:
  virtual ~SessionLegs() = default;
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

class SessionServer;

// One session's legs and reply batching, whatever carries its messages (a gRPC Session call, or
// the session socket: worker/session_socket.h). The transport hands it each SessionUp (Handle),
// writes the batches it asks for (WriteBatch, then Written), and finishes once told (Close).
// Deletes itself when the last reference goes: the transport holds one until it is done, and
// every live leg holds one until its last reply.
class SessionCore {
 public:
  SessionCore(SessionServer* server, SessionLegs* legs) : server_(server), legs_(legs) {}
  SessionCore(const SessionCore&) = delete;
  SessionCore& operator=(const SessionCore&) = delete;

  // Starts (or cancels) the legs `up` carries. Ignored once the session has ended.
  void Handle(const proto::SessionUp& up);
  // The write WriteBatch started completed (`ok`: the peer has it).
  void Written(bool ok);
  // The session is over: no new legs, live legs cancelled, Close(status) once no write is in
  // flight. Idempotent.
  void End(grpc::Status status);
  bool ended();

  void Ref() { refs_.fetch_add(1); }
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

 protected:
  virtual ~SessionCore() = default;
  // Starts writing `batch` (owned by the core until Written); Written follows, on any thread.
  virtual void WriteBatch(const proto::SessionDown* batch) = 0;
  // No write is in flight and none will start: end the transport with `status`. Called once.
  virtual void Close(const grpc::Status& status) = 0;
  // The transport is done with the core: it leaves its SessionServer.
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

  SessionServer* const server_;
  SessionLegs* const legs_;
  std::atomic<int> refs_{1};  // the transport + one per live leg
  std::mutex mu_;
  std::unordered_map<uint64_t, std::function<void()>> live_ ABSL_GUARDED_BY(mu_);  // id -> cancel
  proto::SessionDown pending_ ABSL_GUARDED_BY(mu_);  // replies waiting for the next write
  proto::SessionDown in_flight_;  // the write in flight (owned by it while writing_)
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool start_write_ ABSL_GUARDED_BY(mu_) = false;  // in_flight_ is filled, WriteBatch is due
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool close_called_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status end_status_;  // set once, with ended_
};

// The open sessions of one worker, over either transport.
class SessionServer {
 public:
  SessionServer() = default;
  ~SessionServer();
  SessionServer(const SessionServer&) = delete;
  SessionServer& operator=(const SessionServer&) = delete;

  // A reactor for a new Session call; `legs` must outlive it.
  grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown>* Open(SessionLegs* legs);
  // A reactor that ends a Session call at once with `status` (refused before anything ran).
  static grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown>* Refuse(grpc::Status status);
  // Registers a session another transport opened (ended at once when the server is closed).
  void Add(SessionCore* session);
  // Ends every open session (cancelling its legs) and every session opened from now on.
  void CloseAll();

 private:
  friend class SessionCore;
  void Forget(SessionCore* session);

  std::mutex mu_;
  std::unordered_set<SessionCore*> open_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_SESSION_SERVER_H_
