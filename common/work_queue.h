// WorkQueue: a fixed set of threads running posted jobs, with a bounded backlog.
//
// For CPU-heavy work a server must not do on its I/O threads (the router parses requests, renders
// chat templates and tokenizes prompts of up to --max-payload-size here, so that health probes and
// token streams keep their threads while a large prompt is tokenized). Post() refuses a job, and
// returns false, once `max_pending` jobs are queued or running: the caller answers "busy" at once
// instead of holding the job's memory in an unbounded line.
//
// Thread-safety: every method may be called from any thread. Jobs run on the queue's threads in
// the order posted (one at a time per thread) and must not throw. Stop() (also run by the
// destructor) refuses new jobs, destroys the queued ones unrun on the calling thread (a job must
// be safe to destroy without running: e.g. a responder that answers or closes on destruction),
// and joins the threads once their running jobs return. Stop() must not be called from a job.
#ifndef TANDEM_COMMON_WORK_QUEUE_H_
#define TANDEM_COMMON_WORK_QUEUE_H_

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tandem {

class WorkQueue {
 public:
  // `threads` >= 1 and `max_pending` >= `threads` (values below are raised to them); `name`
  // names the threads (at most 15 bytes are kept, Linux's limit).
  WorkQueue(std::string name, int threads, int max_pending);
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `job`; false (and `job` destroyed unrun) when max_pending jobs are queued or running,
  // or after Stop().
  bool Post(std::function<void()> job);

  // Jobs queued or running now.
  int pending() const;
  int max_pending() const { return max_pending_; }

  void Stop();

 private:
  void Run();

  const std::string name_;
  const int max_pending_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tandem

#endif  // TANDEM_COMMON_WORK_QUEUE_H_
