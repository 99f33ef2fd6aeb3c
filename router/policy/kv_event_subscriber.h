// KvEventSubscriber: keeps a KvEventIndex in step with the workers' KV events
// (docs/router.md "KV events"), polling each worker's GetKvEvents.
//
// Every `poll_interval` a thread of its own asks `workers()` for the URLs to follow (the
// registry's prefill and regular workers), starts a follower thread for each new one, stops the
// followers of workers no longer listed (and, once such a follower has returned, forgets the
// worker: RemoveWorker), and publishes the metrics. Each follower, every `poll_interval`: connects
// and proves the cluster secret once (a channel per worker, its calls carrying the cluster token),
// then takes a snapshot while the index is not synced for it, and otherwise reads the events after
// the index's seq, paging until caught up (at most max_pages_per_poll pages). So a slow or
// unreachable worker (a call waits up to `call_timeout`) delays only its own index, never the
// other workers'. A failed call (worker down, UNAUTHENTICATED, FAILED_PRECONDITION: it publishes
// no events) leaves the worker unsynced, so cache_aware uses its tree for it; a failed connection
// is retried on the next poll, a failed call after unsync drops the channel so the next poll
// proves again. Failures are logged at debug level, and as a warning at most once per
// `warn_every` (with the count of those not logged).
//
// Metrics (after each round, per followed worker): tandem_router_kv_index_blocks{worker},
// tandem_router_kv_index_synced{worker} (1 or 0), tandem_router_kv_index_seq{worker}.
//
// Bounds: per worker one thread and one call at a time, each with `call_timeout`; per worker the
// index's own cap. Stop waits for each follower's poll in progress (every call in it bounded by
// call_timeout; a worker that does not answer fails its first).
// Thread-safety: Start/Stop/PollOnce from one thread; `workers` (which must not block long) is
// called without any lock of the subscriber held. The index must outlive the subscriber.
#ifndef TANDEM_ROUTER_POLICY_KV_EVENT_SUBSCRIBER_H_
#define TANDEM_ROUTER_POLICY_KV_EVENT_SUBSCRIBER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/log_every.h"
#include "common/metrics.h"
#include "common/steady_cond_var.h"
#include "proto/worker.grpc.pb.h"
#include "router/policy/kv_event_index.h"

namespace tandem::router {

struct KvEventSubscriberOptions {
  std::string cluster_secret;  // "" only where workers demand none
  absl::Duration poll_interval = absl::Milliseconds(50);
  absl::Duration call_timeout = absl::Seconds(5);
  int max_pages_per_poll = 16;
  absl::Duration warn_every = absl::Seconds(30);  // poll failures logged as a warning
};

class KvEventSubscriber {
 public:
  using WorkerList = std::function<std::vector<std::string>()>;  // URLs to follow
  // `metrics` may be null; it and `index` must outlive the subscriber.
  KvEventSubscriber(KvEventIndex* index, WorkerList workers, KvEventSubscriberOptions options,
                    MetricsRegistry* metrics);
  ~KvEventSubscriber();  // Stop()
  KvEventSubscriber(const KvEventSubscriber&) = delete;
  KvEventSubscriber& operator=(const KvEventSubscriber&) = delete;

  void Start();
  void Stop();  // idempotent; joins the thread

  // One round over every worker, one after another on the caller's thread (no follower
  // threads); only when Start was not called.
  void PollOnce();

 private:
  struct Follow {
    std::unique_ptr<proto::Worker::Stub> stub;  // holds the channel
  };
  // A follower thread; `stop` is set with mu_ held (then stop_cv_ signalled) so that a follower
  // checking it under mu_ before waiting cannot miss it; `done` once the thread has returned.
  struct Follower {
    std::string url;
    std::atomic<bool> stop{false};
    std::atomic<bool> done{false};
    std::thread thread;
  };
  // Brings `url` up to date; an error leaves it unsynced.
  absl::Status Update(const std::string& url, Follow& follow);
  // Update, and on failure logs it and drops the channel.
  void UpdateOrReset(const std::string& url, Follow& follow);
  void FollowLoop(Follower* f);
  void Loop();
  void PublishMetrics(const std::vector<std::string>& urls);

  KvEventIndex* const index_;  // not owned
  const WorkerList workers_;
  const KvEventSubscriberOptions options_;
  absl::flat_hash_map<std::string, Follow> follows_;  // PollOnce only
  // The coordinating thread only: followers of listed workers, and stopped ones not yet joined.
  absl::flat_hash_map<std::string, std::unique_ptr<Follower>> followers_;
  std::vector<std::unique_ptr<Follower>> retiring_;
  LogEvery warnings_;
  GaugeFamily* blocks_ = nullptr;
  GaugeFamily* synced_ = nullptr;
  GaugeFamily* seq_ = nullptr;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  SteadyCondVar stop_cv_;  // signalled on Stop and when a follower is told to stop
  std::thread thread_;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_POLICY_KV_EVENT_SUBSCRIBER_H_
