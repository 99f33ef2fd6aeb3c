// KvEventSubscriber: keeps a KvEventIndex in step with the workers' KV events
// (docs/router.md "KV events"), polling each worker's GetKvEvents on one thread of its own.
//
// Every `poll_interval` it asks `workers()` for the URLs to follow (the registry's prefill and
// regular workers), forgets workers no longer listed (RemoveWorker), and for each listed one:
// connects and proves the cluster secret once (a channel per worker, its calls carrying the
// cluster token), then takes a snapshot while the index is not synced for it, and otherwise reads
// the events after the index's seq, paging until caught up (at most max_pages_per_poll pages). A
// failed call (worker down, UNAUTHENTICATED, FAILED_PRECONDITION: it publishes no events) leaves
// the worker unsynced, so cache_aware uses its tree for it; a failed connection is retried on the
// next poll, a failed call after unsync drops the channel so the next poll proves again.
//
// Metrics (after each poll, per followed worker): tandem_router_kv_index_blocks{worker},
// tandem_router_kv_index_synced{worker} (1 or 0), tandem_router_kv_index_seq{worker}.
//
// Bounds: one call at a time, each with `call_timeout`; per worker the index's own cap.
// Thread-safety: Start/Stop from one thread; the thread calls `workers` (which must not block
// long) without holding any lock of its own. The index must outlive the subscriber.
#ifndef TANDEM_ROUTER_POLICY_KV_EVENT_SUBSCRIBER_H_
#define TANDEM_ROUTER_POLICY_KV_EVENT_SUBSCRIBER_H_

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
#include "common/metrics.h"
#include "proto/worker.grpc.pb.h"
#include "router/policy/kv_event_index.h"

namespace tandem::router {

struct KvEventSubscriberOptions {
  std::string cluster_secret;  // "" only where workers demand none
  absl::Duration poll_interval = absl::Milliseconds(50);
  absl::Duration call_timeout = absl::Seconds(5);
  int max_pages_per_poll = 16;
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

  // One round over every worker, on the caller's thread: the loop runs this; a test may call it
  // only when Start was not called (the followed workers belong to one thread at a time).
  void PollOnce();

 private:
  struct Follow {
    std::unique_ptr<proto::Worker::Stub> stub;  // holds the channel
  };
  // Brings `url` up to date; an error leaves it unsynced.
  absl::Status Update(const std::string& url, Follow& follow);
  void Loop();

  KvEventIndex* const index_;  // not owned
  const WorkerList workers_;
  const KvEventSubscriberOptions options_;
  absl::flat_hash_map<std::string, Follow> follows_;  // the polling thread only
  GaugeFamily* blocks_ = nullptr;
  GaugeFamily* synced_ = nullptr;
  GaugeFamily* seq_ = nullptr;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar stop_cv_;
  std::thread thread_;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_POLICY_KV_EVENT_SUBSCRIBER_H_
