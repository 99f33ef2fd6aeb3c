// An in-process emulation of the verbs the rdma backend uses, for tests on machines without an
// RDMA device. Several FakeVerbs "devices" share one FakeFabric; a queue pair connected to
// another device's queue pair writes straight into that device's registered memory.
//
// Emulated semantics: RDMA WRITE checks the rkey and the bounds against the target's memory
// registrations (violations complete with kRemoteAccessError and move both queue pairs to the
// error state, where later work requests complete with kFlushed); the lkey and local bounds are
// checked too (kLocalProtectionError). Work requests apply in order at PostSend; WRITE_WITH_IMM
// and SEND consume a posted receive at the target. Unsignaled successes produce no completion.
// Injection: put a queue pair in error, drop the next N completions, delay completions.
// Thread-safe (one fabric mutex).
#ifndef TANDEM_KVTRANSFER_RDMA_FAKE_VERBS_H_
#define TANDEM_KVTRANSFER_RDMA_FAKE_VERBS_H_

#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kvtransfer/rdma/verbs.h"

namespace tandem::kv::rdma {

class FakeFabric {
 public:
  FakeFabric() = default;
  FakeFabric(const FakeFabric&) = delete;
  FakeFabric& operator=(const FakeFabric&) = delete;

  // Injection.
  void SetQpError(uint32_t qp_num);
  void DropCompletions(int n);
  void DelayCompletions(absl::Duration d);
  // Every queue pair's number (to pick one for SetQpError).
  std::vector<uint32_t> QpNumbers();
  // Number of queue pairs currently in the error state.
  int ErroredQps();

 private:
  friend class FakeVerbs;
  enum class QpState { kReset, kReady, kError };
  struct Mr {
    int device;
    uint64_t addr;
    uint64_t length;
    uint32_t lkey;
  };
  struct RecvWr {
    uint64_t wr_id;
    uint64_t addr;
    uint32_t length;
    uint32_t lkey;
  };
  struct Qp {
    int device;
    uint64_t cq;  // fabric-wide completion queue key
    QpState state = QpState::kReset;
    uint32_t remote_qp = 0;
    std::deque<RecvWr> recvs;
  };
  struct Cqe {
    WorkCompletion wc;
    absl::Time ready;
  };

  void CompleteLocked(uint64_t cq, const WorkCompletion& wc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool LocalOkLocked(int device, uint64_t addr, uint32_t length, uint32_t lkey)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  int next_device_ ABSL_GUARDED_BY(mu_) = 1;
  uint32_t next_key_ ABSL_GUARDED_BY(mu_) = 0x1000;
  uint32_t next_qp_ ABSL_GUARDED_BY(mu_) = 100;
  uint64_t next_cq_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint32_t, Mr> mrs_ ABSL_GUARDED_BY(mu_);  // by rkey (lkey == rkey here)
  std::map<uint32_t, Qp> qps_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::deque<Cqe>> cqs_ ABSL_GUARDED_BY(mu_);
  int drop_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration delay_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
};

// A device on `fabric` (shared by every device of the test; the fabric outlives them).
VerbsPtr CreateFakeVerbs(std::shared_ptr<FakeFabric> fabric, const std::string& name);

}  // namespace tandem::kv::rdma

#endif  // TANDEM_KVTRANSFER_RDMA_FAKE_VERBS_H_
