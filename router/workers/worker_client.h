// WorkerClient: the router's gRPC client for one worker (proto/worker.proto's Worker service).
//
//   ASSIGN_OR_RETURN(auto client, WorkerClient::Create("http://10.0.0.7:30001"));
//   LegPtr leg = client->StartDecode(request, Deadline::After(std::chrono::seconds(60)),
//       [](const proto::DecodeEvent& e) { ... },      // each event, in order
//       [](absl::Status s) { ... });                   // exactly once, last
//   leg->Cancel();                                     // any time, any thread
//
// It is the router's WorkerLegs (router/workers/leg.h) for a worker: legs, with absl::Status, on
// whichever transport the worker offers; the gRPC types stay in the unary calls below, which
// the registry and the admin API use. Every call is asynchronous on gRPC's callback API: no thread
// is held per call; callbacks run on gRPC's threads (or, for cancellations and deadlines, on a
// timer thread) and must not block. One channel per worker, with keepalive pings so that a dead
// peer fails its calls within seconds rather than at the TCP timeout. Prefill and decode legs share
// one Session stream per worker (proto/worker.proto), opened on first use and again after it ends:
// a session that breaks fails the legs on it (UNAVAILABLE, or gRPC's status) and the next leg opens
// a new one. Their deadlines and cancellations are the client's: the leg ends DEADLINE_EXCEEDED or
// CANCELLED at once and the worker is told to abort it. Once a Health answer advertises the
// worker's session socket (proto/worker.proto), new sessions go there instead of rpc Session (fewer
// bytes and no gRPC threads on the path); one that cannot connect fails its legs UNAVAILABLE and,
// for the next 30 s or until a Health answer (asked for at once) advertises another port, sessions
// go over gRPC again.
//
// With a cluster secret, the client trusts the worker only once it proved the secret (Prove,
// proto/cluster_proof.proto): until then every call but Prove fails at once with UNAVAILABLE
// "unverified: ..." without reaching the worker, and the channel attaches no token to anything,
// so a stranger added as a worker sees neither tokens nor prompts. Afterwards every token names
// the worker's instance id from its proof (common/cluster_token.h), so a token it receives opens
// nothing elsewhere. A leg the worker refuses as UNAUTHENTICATED (it restarted, so it has a new
// instance id) ends UNAVAILABLE instead, so the dispatcher retries it elsewhere and reports the
// worker, and the client is unverified again until the next Prove. Without a secret the client
// is verified from the start.
//
// Thread-safety: thread-safe. Ownership: shared (std::shared_ptr); a call in flight keeps what it
// needs alive itself, so the client may be dropped while calls are running.
#ifndef TANDEM_ROUTER_WORKERS_WORKER_CLIENT_H_
#define TANDEM_ROUTER_WORKERS_WORKER_CLIENT_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/cluster_proof.grpc.pb.h"
#include "proto/worker.grpc.pb.h"
#include "proto/worker.pb.h"
#include "router/workers/leg.h"

namespace tandem::router {

// A call in flight. Cancel() is safe at any time, from any thread, any number of times, before or
// after the call completed; a call cancelled before it completed reports CANCELLED to `done`.
class CallHandle {
 public:
  virtual ~CallHandle() = default;
  virtual void Cancel() = 0;
};

// A worker address split into its parts.
struct WorkerAddress {
  std::string host;    // "10.0.0.7", "localhost", "::1" (no brackets)
  int port = 0;        // 1..65535
  std::string target;  // for grpc::CreateChannel: "host:port" or "[::1]:port"
};

// Accepts "http://host:port", "grpc://host:port", "host:port" and IPv6 "[addr]:port" (with or
// without a scheme), with an optional trailing "/". Anything else (another scheme, a path, no or
// a bad port, an empty host) is InvalidArgument naming the url.
absl::StatusOr<WorkerAddress> ParseWorkerUrl(const std::string& url);

class WorkerLink;
class LegStream;
class ClusterAudience;

class WorkerClient : public WorkerLegs, public std::enable_shared_from_this<WorkerClient> {
 public:
  // url: "http://host:port", "host:port" or "grpc://host:port". Errors name the bad url.
  // A non-empty `cluster_secret` authenticates every call (router/workers/cluster_credentials.h).
  static absl::StatusOr<std::shared_ptr<WorkerClient>> Create(
      const std::string& url, const std::string& cluster_secret = "");

  // Legs in flight run to their end; the link closes after the last.
  ~WorkerClient() override;
  WorkerClient(const WorkerClient&) = delete;
  WorkerClient& operator=(const WorkerClient&) = delete;

  const std::string& url() const { return url_; }
  const std::string& host() const { return address_.host; }  // the decode leg's bootstrap_host
  int port() const { return address_.port; }
  // The session socket port the worker's last Health answer advertised (0: none, legs go on
  // rpc Session).
  int session_port();

  // True once the worker proved the cluster secret (always, without a secret).
  bool verified() const;
  // Asks the worker to prove the cluster secret (a fresh nonce, no token). `done` runs exactly
  // once on a gRPC or timer thread: OK once verified (tokens from now on name the instance id
  // the worker reported), otherwise why not, keeping the status code of a transport failure
  // (UNAVAILABLE, DEADLINE_EXCEEDED) and Unauthenticated "the worker did not prove the cluster
  // secret: ..." for any answer that is not a proof. Without a secret: OK at once.
  std::shared_ptr<CallHandle> Prove(absl::Time deadline, std::function<void(absl::Status)> done);
  // The worker refused a token made for its proven instance id (it restarted or changed its
  // secret): unverified again until the next Prove; the current link is retired.
  void ForgetProof();

  // WorkerLegs. Legs travel on the worker's link (see the class comment); their callbacks run
  // on the transport's thread (gRPC's or the session socket's) or the LegTimers thread.
  LegPtr StartPrefill(proto::PrefillRequest request, Deadline deadline,
                      PrefillDoneFn done) override;
  LegPtr StartDecode(proto::DecodeRequest request, Deadline deadline, LegEventFn on_event,
                     LegDoneFn done) override;
  // The Abort RPC, its answer ignored.
  void AbortLegs(proto::AbortRequest request, Deadline deadline) override;

  // Small unary calls with a deadline; `done` runs exactly once on a gRPC thread. The handle
  // (which callers may ignore) cancels.
  std::shared_ptr<CallHandle> Abort(proto::AbortRequest request, absl::Time deadline,
                                    std::function<void(grpc::Status, proto::AbortResponse)> done);
  std::shared_ptr<CallHandle> Health(bool generate, absl::Time deadline,
                                     std::function<void(grpc::Status, proto::HealthResponse)> done);
  std::shared_ptr<CallHandle> GetLoad(absl::Time deadline,
                                      std::function<void(grpc::Status, proto::LoadReport)> done);
  std::shared_ptr<CallHandle> FlushCache(
      absl::Time deadline, std::function<void(grpc::Status, proto::FlushCacheResponse)> done);
  std::shared_ptr<CallHandle> GetServerInfo(
      absl::Time deadline, std::function<void(grpc::Status, proto::ServerInfo)> done);

 private:
  WorkerClient(std::string url, WorkerAddress address, std::shared_ptr<grpc::Channel> channel,
               std::string cluster_secret, std::shared_ptr<ClusterAudience> audience);
  // The status of every call to a worker that has not proven the secret.
  absl::Status Unverified() const;
  // Maps a leg's final status: UNAUTHENTICATED from a proven worker becomes UNAVAILABLE and
  // makes the worker unverified (see the .cc).
  std::function<absl::Status(absl::Status)> LegStatusFilter();
  // Sets the proven instance id, or clears it (""); retires the link opened under another.
  void SetAudience(std::string instance_id);
  // Sends a leg on the current link (opening one when there is none or it is closing).
  void SendLeg(const std::shared_ptr<LegStream>& call, proto::SessionCall* message,
               Deadline deadline) ABSL_LOCKS_EXCLUDED(link_mu_);
  // A new link, on the session socket when the worker advertised one and it has not failed
  // to connect within the last kSocketRetry.
  std::shared_ptr<WorkerLink> OpenLinkLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_mu_);
  // A Health answer's session port: a new or changed one retires the current link, so the
  // next leg goes to the socket.
  void LearnSessionPort(int port);

  const std::string url_;
  const WorkerAddress address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<proto::Worker::Stub> stub_;
  std::unique_ptr<proto::ClusterProof::Stub> proof_stub_;
  const std::string cluster_secret_;
  // The instance id tokens name; shared with the channel's interceptor. "" until proven.
  const std::shared_ptr<ClusterAudience> audience_;
  std::atomic<bool> verified_{false};  // mirrors !audience_->Get().empty() for the hot path
  absl::Mutex link_mu_;
  std::shared_ptr<WorkerLink> link_ ABSL_GUARDED_BY(link_mu_);
  int session_port_ ABSL_GUARDED_BY(link_mu_) = 0;  // 0 = none advertised
  absl::Time socket_retry_after_ ABSL_GUARDED_BY(link_mu_);
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_WORKERS_WORKER_CLIENT_H_
