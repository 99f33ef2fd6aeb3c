// The server side of rpc Session (proto/worker.proto): prefill and decode legs multiplexed on one
// long-lived stream from the router, answered through a SessionLegs.
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

#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_set>

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

class SessionReactor;

// The open sessions of one gRPC service.
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
  // Ends every open session (cancelling its legs) and every session opened from now on.
  void CloseAll();

 private:
  friend class SessionReactor;
  void Forget(SessionReactor* session);

  std::mutex mu_;
  std::unordered_set<SessionReactor*> open_;  // guarded by mu_
  bool closed_ = false;                       // guarded by mu_
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_SESSION_SERVER_H_
