#include "kvtransfer/rdma/fake_verbs.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace tandem::kv::rdma {

void FakeFabric::SetQpError(uint32_t qp_num) {
  absl::MutexLock lock(&mu_);
  auto it = qps_.find(qp_num);
  if (it != qps_.end()) it->second.state = QpState::kError;
}

void FakeFabric::DropCompletions(int n) {
  absl::MutexLock lock(&mu_);
  drop_ = n;
}

void FakeFabric::DelayCompletions(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  delay_ = d;
}

std::vector<uint32_t> FakeFabric::QpNumbers() {
  absl::MutexLock lock(&mu_);
  std::vector<uint32_t> out;
  for (const auto& [num, qp] : qps_) out.push_back(num);
  return out;
}

int FakeFabric::ErroredQps() {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [num, qp] : qps_) n += qp.state == QpState::kError;
  return n;
}

void FakeFabric::CompleteLocked(uint64_t cq, const WorkCompletion& wc) {
  if (drop_ > 0) {
    --drop_;
    return;
  }
  cqs_[cq].push_back(Cqe{wc, absl::Now() + delay_});
}

bool FakeFabric::LocalOkLocked(int device, uint64_t addr, uint32_t length, uint32_t lkey) {
  auto it = mrs_.find(lkey);
  return it != mrs_.end() && it->second.device == device && addr >= it->second.addr &&
         addr - it->second.addr <= it->second.length &&
         length <= it->second.length - (addr - it->second.addr);
}

// Not in an anonymous namespace: FakeFabric befriends it.
class FakeVerbs final : public Verbs {
 public:
  FakeVerbs(std::shared_ptr<FakeFabric> fabric, std::string name)
      : fabric_(std::move(fabric)), name_(std::move(name)) {
    absl::MutexLock lock(&fabric_->mu_);
    device_ = fabric_->next_device_++;
  }

  std::string device_name() const override { return name_; }

  absl::StatusOr<PortInfo> QueryPort() override {
    PortInfo p;
    p.lid = static_cast<uint16_t>(device_);
    p.gid[15] = static_cast<uint8_t>(device_);
    p.active_mtu = 4096;
    p.max_msg_size = 1u << 30;
    return p;
  }

  absl::StatusOr<Handle> AllocPd() override { return 1; }

  absl::StatusOr<MemoryRegistration> RegisterMemory(Handle, void* addr, uint64_t length) override {
    absl::MutexLock lock(&fabric_->mu_);
    uint32_t key = fabric_->next_key_++;
    fabric_->mrs_[key] = {device_, reinterpret_cast<uint64_t>(addr), length, key};
    return MemoryRegistration{key, key, key};
  }

  absl::StatusOr<Handle> CreateCq(int) override {
    absl::MutexLock lock(&fabric_->mu_);
    uint64_t cq = fabric_->next_cq_++;
    fabric_->cqs_[cq];
    return cq;
  }

  absl::StatusOr<QueuePair> CreateQp(Handle, Handle cq, int, int) override {
    absl::MutexLock lock(&fabric_->mu_);
    uint32_t num = fabric_->next_qp_++;
    fabric_->qps_[num] = FakeFabric::Qp{device_, cq};
    return QueuePair{num, num};
  }

  absl::Status ConnectQp(Handle qp, uint32_t, const QpAddress& remote) override {
    absl::MutexLock lock(&fabric_->mu_);
    auto it = fabric_->qps_.find(static_cast<uint32_t>(qp));
    if (it == fabric_->qps_.end()) return absl::NotFoundError("fake verbs: no such qp");
    it->second.remote_qp = remote.qp_num;
    it->second.state = FakeFabric::QpState::kReady;
    return absl::OkStatus();
  }

  absl::Status PostSend(Handle qp, absl::Span<const SendRequest> chain) override {
    absl::MutexLock lock(&fabric_->mu_);
    auto it = fabric_->qps_.find(static_cast<uint32_t>(qp));
    if (it == fabric_->qps_.end()) return absl::NotFoundError("fake verbs: no such qp");
    FakeFabric::Qp& q = it->second;
    if (q.state == FakeFabric::QpState::kReset) {
      return absl::FailedPreconditionError("fake verbs: post_send on a qp that is not RTS");
    }
    for (const SendRequest& r : chain) {
      WorkCompletion wc;
      wc.wr_id = r.wr_id;
      wc.qp_num = static_cast<uint32_t>(qp);
      wc.opcode = r.opcode == SendRequest::kSend ? WcOpcode::kSend : WcOpcode::kRdmaWrite;
      wc.byte_len = r.length;
      wc.status = Execute(q, r);
      if (wc.status != WcStatus::kSuccess) q.state = FakeFabric::QpState::kError;
      if (r.signaled || wc.status != WcStatus::kSuccess) fabric_->CompleteLocked(q.cq, wc);
    }
    return absl::OkStatus();
  }

  absl::Status PostRecv(Handle qp, uint64_t wr_id, uint64_t addr, uint32_t length,
                        uint32_t lkey) override {
    absl::MutexLock lock(&fabric_->mu_);
    auto it = fabric_->qps_.find(static_cast<uint32_t>(qp));
    if (it == fabric_->qps_.end()) return absl::NotFoundError("fake verbs: no such qp");
    it->second.recvs.push_back({wr_id, addr, length, lkey});
    return absl::OkStatus();
  }

  absl::StatusOr<int> PollCq(Handle cq, absl::Span<WorkCompletion> out) override {
    absl::MutexLock lock(&fabric_->mu_);
    auto& q = fabric_->cqs_[cq];
    int n = 0;
    const absl::Time now = absl::Now();
    while (n < static_cast<int>(out.size()) && !q.empty() && q.front().ready <= now) {
      out[n++] = q.front().wc;
      q.pop_front();
    }
    return n;
  }

  void DestroyQp(Handle qp) override {
    absl::MutexLock lock(&fabric_->mu_);
    fabric_->qps_.erase(static_cast<uint32_t>(qp));
  }
  void DestroyCq(Handle cq) override {
    absl::MutexLock lock(&fabric_->mu_);
    fabric_->cqs_.erase(cq);
  }
  void DeregisterMemory(Handle mr) override {
    absl::MutexLock lock(&fabric_->mu_);
    fabric_->mrs_.erase(static_cast<uint32_t>(mr));
  }
  void DeallocPd(Handle) override {}

 private:
  // Applies one work request; the fabric lock is held.
  WcStatus Execute(FakeFabric::Qp& q, const SendRequest& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(fabric_->mu_) {
    if (q.state == FakeFabric::QpState::kError) return WcStatus::kFlushed;
    if (!fabric_->LocalOkLocked(device_, r.local_addr, r.length, r.lkey)) {
      return WcStatus::kLocalProtectionError;
    }
    auto rq = fabric_->qps_.find(q.remote_qp);
    if (rq == fabric_->qps_.end()) return WcStatus::kRetryExceeded;  // the peer vanished
    FakeFabric::Qp& remote = rq->second;
    if (remote.state != FakeFabric::QpState::kReady) return WcStatus::kRetryExceeded;
    if (r.opcode == SendRequest::kSend) {
      if (remote.recvs.empty()) return WcStatus::kGeneralError;  // receiver not ready
      FakeFabric::RecvWr rw = remote.recvs.front();
      remote.recvs.pop_front();
      if (r.length > rw.length) return WcStatus::kGeneralError;
      std::memcpy(reinterpret_cast<void*>(rw.addr), reinterpret_cast<void*>(r.local_addr),
                  r.length);
      WorkCompletion in;
      in.wr_id = rw.wr_id;
      in.opcode = WcOpcode::kRecv;
      in.qp_num = q.remote_qp;
      in.byte_len = r.length;
      fabric_->CompleteLocked(remote.cq, in);
      return WcStatus::kSuccess;
    }
    auto mr = fabric_->mrs_.find(r.rkey);
    if (mr == fabric_->mrs_.end() || mr->second.device != remote.device ||
        r.remote_addr < mr->second.addr || r.remote_addr - mr->second.addr > mr->second.length ||
        r.length > mr->second.length - (r.remote_addr - mr->second.addr)) {
      remote.state = FakeFabric::QpState::kError;
      return WcStatus::kRemoteAccessError;
    }
    std::memcpy(reinterpret_cast<void*>(r.remote_addr), reinterpret_cast<void*>(r.local_addr),
                r.length);
    if (r.opcode == SendRequest::kWriteWithImm) {
      if (remote.recvs.empty()) return WcStatus::kGeneralError;
      FakeFabric::RecvWr rw = remote.recvs.front();
      remote.recvs.pop_front();
      WorkCompletion in;
      in.wr_id = rw.wr_id;
      in.opcode = WcOpcode::kRecvWithImm;
      in.qp_num = q.remote_qp;
      in.imm = r.imm;
      fabric_->CompleteLocked(remote.cq, in);
    }
    return WcStatus::kSuccess;
  }

  std::shared_ptr<FakeFabric> fabric_;  // shared by every device on the fabric
  const std::string name_;
  int device_ = 0;
};

VerbsPtr CreateFakeVerbs(std::shared_ptr<FakeFabric> fabric, const std::string& name) {
  return VerbsPtr(new FakeVerbs(std::move(fabric), name));
}

}  // namespace tandem::kv::rdma
