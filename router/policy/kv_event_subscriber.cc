#include "router/policy/kv_event_subscriber.h"

#include <chrono>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "router/workers/cluster_credentials.h"
#include "router/workers/worker_client.h"
#include "spdlog/spdlog.h"

namespace tandem::router {
namespace {

KvSnapshot ToSnapshot(const proto::KvEventsReply& r) {
  KvSnapshot s;
  s.incarnation = r.incarnation();
  s.block_size = r.block_size();
  s.seq = r.seq();
  s.block_hashes.assign(r.stored_hashes().begin(), r.stored_hashes().end());
  return s;
}

KvEventBatch ToBatch(const proto::KvEventsReply& r) {
  KvEventBatch b;
  b.incarnation = r.incarnation();
  b.block_size = r.block_size();
  b.gap = r.gap();
  b.last_seq = r.seq();
  b.events.reserve(static_cast<size_t>(r.events_size()));
  for (const auto& e : r.events()) {
    b.events.push_back(KvBlockEvent{
        e.seq(), e.removed() ? KvBlockEvent::Kind::kRemoved : KvBlockEvent::Kind::kStored,
        e.block_hash()});
  }
  return b;
}

absl::Status FromGrpc(const grpc::Status& s, const std::string& url) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat("GetKvEvents on ", url, ": ", s.error_message()));
}

}  // namespace

KvEventSubscriber::KvEventSubscriber(KvEventIndex* index, WorkerList workers,
                                     KvEventSubscriberOptions options, MetricsRegistry* metrics)
    : index_(index),
      workers_(std::move(workers)),
      options_(std::move(options)),
      warnings_(options_.warn_every) {
  if (metrics != nullptr) {
    blocks_ = &metrics->AddGauge("tandem_router_kv_index_blocks",
                                 "KV blocks the router's event index holds per worker", {"worker"});
    synced_ = &metrics->AddGauge("tandem_router_kv_index_synced",
                                 "1 while the KV event index is in step with the worker's cache",
                                 {"worker"});
    seq_ = &metrics->AddGauge("tandem_router_kv_index_seq",
                              "Last KV event sequence number applied per worker", {"worker"});
  }
}

KvEventSubscriber::~KvEventSubscriber() { Stop(); }

void KvEventSubscriber::Start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void KvEventSubscriber::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    stop_cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  // The coordinating thread has returned: its followers are this thread's now.
  for (auto& [url, f] : followers_) retiring_.push_back(std::move(f));
  followers_.clear();
  for (auto& f : retiring_) {
    if (f->thread.joinable()) f->thread.join();
  }
  retiring_.clear();
}

void KvEventSubscriber::Loop() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    const std::vector<std::string> urls = workers_();
    const absl::flat_hash_set<std::string> listed(urls.begin(), urls.end());
    // Followers of workers no longer listed stop; the worker is forgotten once its follower has
    // returned (so that it cannot apply a reply after the removal).
    for (auto it = followers_.begin(); it != followers_.end();) {
      if (listed.contains(it->first)) {
        ++it;
        continue;
      }
      {
        absl::MutexLock lock(&mu_);
        it->second->stop.store(true);
        stop_cv_.SignalAll();
      }
      retiring_.push_back(std::move(it->second));
      followers_.erase(it++);
    }
    absl::flat_hash_set<std::string> still_retiring;
    for (auto it = retiring_.begin(); it != retiring_.end();) {
      if ((*it)->done.load()) {
        (*it)->thread.join();
        if (!listed.contains((*it)->url)) index_->RemoveWorker((*it)->url);
        it = retiring_.erase(it);
      } else {
        still_retiring.insert((*it)->url);
        ++it;
      }
    }
    for (const std::string& url : urls) {
      if (followers_.contains(url) || still_retiring.contains(url)) continue;
      auto f = std::make_unique<Follower>();
      f->url = url;
      Follower* raw = f.get();
      f->thread = std::thread([this, raw] { FollowLoop(raw); });
      followers_.emplace(url, std::move(f));
    }
    PublishMetrics(urls);
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stop_cv_.WaitFor(&mu_, absl::ToChronoNanoseconds(options_.poll_interval));
  }
}

void KvEventSubscriber::FollowLoop(Follower* f) {
  Follow follow;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ || f->stop.load()) break;
    }
    UpdateOrReset(f->url, follow);
    absl::MutexLock lock(&mu_);
    if (stopping_ || f->stop.load()) break;
    stop_cv_.WaitFor(&mu_, absl::ToChronoNanoseconds(options_.poll_interval));
  }
  f->done.store(true);
}

void KvEventSubscriber::UpdateOrReset(const std::string& url, Follow& follow) {
  absl::Status s = Update(url, follow);
  if (s.ok()) return;
  spdlog::debug("kv events: {}", s.ToString());
  int64_t more = 0;
  if (warnings_.Allow(&more)) {
    spdlog::warn(
        "kv events: {} (cache_aware uses its prefix tree for this worker until it is "
        "synced; {} more failures since the last warning)",
        s.ToString(), more);
  }
  follow.stub.reset();  // prove again next time (the worker may have restarted)
}

void KvEventSubscriber::PollOnce() {
  const std::vector<std::string> urls = workers_();
  const absl::flat_hash_set<std::string> listed(urls.begin(), urls.end());
  for (auto it = follows_.begin(); it != follows_.end();) {
    if (!listed.contains(it->first)) {
      index_->RemoveWorker(it->first);
      follows_.erase(it++);
    } else {
      ++it;
    }
  }
  for (const std::string& url : urls) UpdateOrReset(url, follows_[url]);
  PublishMetrics(urls);
}

void KvEventSubscriber::PublishMetrics(const std::vector<std::string>& urls) {
  if (blocks_ == nullptr) return;
  for (const KvEventIndex::WorkerView& v : index_->Describe()) {
    blocks_->WithLabels({v.url}).Set(static_cast<double>(v.blocks));
    synced_->WithLabels({v.url}).Set(v.synced ? 1 : 0);
    seq_->WithLabels({v.url}).Set(static_cast<double>(v.seq));
  }
  for (const std::string& url : urls) {
    if (!index_->Synced(url)) synced_->WithLabels({url}).Set(0);
  }
}

absl::Status KvEventSubscriber::Update(const std::string& url, Follow& follow) {
  if (follow.stub == nullptr) {
    absl::StatusOr<WorkerAddress> address = ParseWorkerUrl(url);
    if (!address.ok()) return address.status();
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = ConnectProvenWorker(
        address->target, options_.cluster_secret, absl::Now() + options_.call_timeout);
    if (!channel.ok()) return channel.status();
    follow.stub = proto::Worker::NewStub(*channel);
  }
  auto call = [&](const proto::KvEventsRequest& request,
                  proto::KvEventsReply* reply) -> absl::Status {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
    grpc::Status s = follow.stub->GetKvEvents(&ctx, request, reply);
    return s.ok() ? absl::OkStatus() : FromGrpc(s, url);
  };
  for (int page = 0; page < options_.max_pages_per_poll; ++page) {
    proto::KvEventsReply reply;
    if (!index_->Synced(url)) {
      proto::KvEventsRequest request;
      request.set_snapshot(true);
      if (absl::Status s = call(request, &reply); !s.ok()) return s;
      if (index_->ApplySnapshot(url, ToSnapshot(reply)) != KvEventIndex::Apply::kApplied) {
        return absl::ResourceExhaustedError(absl::StrCat(url, ": KV event snapshot too large"));
      }
      continue;  // then the events after it
    }
    proto::KvEventsRequest request;
    request.set_after_seq(index_->NextSeq(url));
    if (absl::Status s = call(request, &reply); !s.ok()) {
      index_->RemoveWorker(url);  // unknown until read again
      return s;
    }
    if (index_->ApplyEvents(url, ToBatch(reply)) == KvEventIndex::Apply::kNeedSnapshot) continue;
    if (reply.events_size() == 0 || index_->NextSeq(url) >= reply.seq()) return absl::OkStatus();
  }
  return absl::OkStatus();  // more next poll
}

}  // namespace tandem::router
