// Verbs over libibverbs: the implementation used on machines with an RDMA device.
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kvtransfer/rdma/verbs.h"

namespace tandem::kv::rdma {
namespace {

absl::Status Errno(const char* call) {
  return absl::InternalError(absl::StrCat("rdma: ", call, " failed: ", std::strerror(errno)));
}

int MtuBytes(ibv_mtu m) { return 128 << (static_cast<int>(m) - 1); }
ibv_mtu MtuEnum(int bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

WcStatus MapStatus(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS:
      return WcStatus::kSuccess;
    case IBV_WC_LOC_PROT_ERR:
      return WcStatus::kLocalProtectionError;
    case IBV_WC_REM_ACCESS_ERR:
      return WcStatus::kRemoteAccessError;
    case IBV_WC_WR_FLUSH_ERR:
      return WcStatus::kFlushed;
    case IBV_WC_RETRY_EXC_ERR:
      return WcStatus::kRetryExceeded;
    default:
      return WcStatus::kGeneralError;
  }
}

class Ibverbs final : public Verbs {
 public:
  Ibverbs(ibv_context* ctx, std::string name, int port, int gid_index)
      : ctx_(ctx), name_(std::move(name)), port_(port), gid_index_(gid_index) {}
  ~Ibverbs() override { ibv_close_device(ctx_); }
  Ibverbs(const Ibverbs&) = delete;
  Ibverbs& operator=(const Ibverbs&) = delete;

  std::string device_name() const override { return name_; }

  absl::StatusOr<PortInfo> QueryPort() override {
    ibv_port_attr attr;
    if (ibv_query_port(ctx_, port_, &attr) != 0) return Errno("ibv_query_port");
    if (attr.state != IBV_PORT_ACTIVE) {
      return absl::UnavailableError(
          absl::StrCat("rdma: port ", port_, " of ", name_, " is not active"));
    }
    PortInfo info;
    info.lid = attr.lid;
    info.active_mtu = MtuBytes(attr.active_mtu);
    info.max_msg_size = attr.max_msg_sz;
    ibv_gid gid;
    if (ibv_query_gid(ctx_, port_, gid_index_, &gid) != 0) return Errno("ibv_query_gid");
    std::memcpy(info.gid.data(), gid.raw, 16);
    return info;
  }

  absl::StatusOr<Handle> AllocPd() override {
    ibv_pd* pd = ibv_alloc_pd(ctx_);
    if (pd == nullptr) return Errno("ibv_alloc_pd");
    return Keep(pd);
  }

  absl::StatusOr<MemoryRegistration> RegisterMemory(Handle pd, void* addr,
                                                    uint64_t length) override {
    ibv_mr* mr =
        ibv_reg_mr(Get<ibv_pd>(pd), addr, length, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (mr == nullptr) return Errno("ibv_reg_mr");
    return MemoryRegistration{Keep(mr), mr->lkey, mr->rkey};
  }

  absl::StatusOr<Handle> CreateCq(int entries) override {
    ibv_cq* cq = ibv_create_cq(ctx_, entries, nullptr, nullptr, 0);
    if (cq == nullptr) return Errno("ibv_create_cq");
    return Keep(cq);
  }

  absl::StatusOr<QueuePair> CreateQp(Handle pd, Handle cq, int max_send_wr,
                                     int max_recv_wr) override {
    ibv_qp_init_attr init{};
    init.send_cq = Get<ibv_cq>(cq);
    init.recv_cq = Get<ibv_cq>(cq);
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = max_send_wr;
    init.cap.max_recv_wr = max_recv_wr;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    ibv_qp* qp = ibv_create_qp(Get<ibv_pd>(pd), &init);
    if (qp == nullptr) return Errno("ibv_create_qp");
    return QueuePair{Keep(qp), qp->qp_num};
  }

  absl::Status ConnectQp(Handle h, uint32_t local_psn, const QpAddress& remote) override {
    ibv_qp* qp = Get<ibv_qp>(h);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = port_;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
      return Errno("ibv_modify_qp(INIT)");
    }
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = MtuEnum(remote.mtu);
    a.dest_qp_num = remote.qp_num;
    a.rq_psn = remote.psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = remote.lid;
    a.ah_attr.port_num = port_;
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid.data(), 16);
    a.ah_attr.grh.sgid_index = gid_index_;
    a.ah_attr.grh.hop_limit = 64;
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
      return Errno("ibv_modify_qp(RTR)");
    }
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = local_psn;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
      return Errno("ibv_modify_qp(RTS)");
    }
    return absl::OkStatus();
  }

  absl::Status PostSend(Handle qp, absl::Span<const SendRequest> chain) override {
    if (chain.empty()) return absl::OkStatus();
    std::vector<ibv_sge> sges(chain.size());
    std::vector<ibv_send_wr> wrs(chain.size());
    for (size_t i = 0; i < chain.size(); ++i) {
      const SendRequest& r = chain[i];
      sges[i] = ibv_sge{r.local_addr, r.length, r.lkey};
      ibv_send_wr& w = wrs[i];
      w = ibv_send_wr{};
      w.wr_id = r.wr_id;
      w.sg_list = &sges[i];
      w.num_sge = 1;
      w.send_flags = r.signaled ? IBV_SEND_SIGNALED : 0;
      switch (r.opcode) {
        case SendRequest::kWrite:
          w.opcode = IBV_WR_RDMA_WRITE;
          break;
        case SendRequest::kWriteWithImm:
          w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
          w.imm_data = htonl(r.imm);
          break;
        case SendRequest::kSend:
          w.opcode = IBV_WR_SEND;
          break;
      }
      w.wr.rdma.remote_addr = r.remote_addr;
      w.wr.rdma.rkey = r.rkey;
      w.next = i + 1 < chain.size() ? &wrs[i + 1] : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(Get<ibv_qp>(qp), wrs.data(), &bad) != 0) return Errno("ibv_post_send");
    return absl::OkStatus();
  }

  absl::Status PostRecv(Handle qp, uint64_t wr_id, uint64_t addr, uint32_t length,
                        uint32_t lkey) override {
    ibv_sge sge{addr, length, lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (ibv_post_recv(Get<ibv_qp>(qp), &wr, &bad) != 0) return Errno("ibv_post_recv");
    return absl::OkStatus();
  }

  absl::StatusOr<int> PollCq(Handle cq, absl::Span<WorkCompletion> out) override {
    ibv_wc wc[32];
    int n = ibv_poll_cq(Get<ibv_cq>(cq), std::min<int>(32, out.size()), wc);
    if (n < 0) return Errno("ibv_poll_cq");
    for (int i = 0; i < n; ++i) {
      WorkCompletion& c = out[i];
      c.wr_id = wc[i].wr_id;
      c.status = MapStatus(wc[i].status);
      c.qp_num = wc[i].qp_num;
      c.byte_len = wc[i].byte_len;
      c.imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc[i].imm_data) : 0;
      switch (wc[i].opcode) {
        case IBV_WC_RDMA_WRITE:
          c.opcode = WcOpcode::kRdmaWrite;
          break;
        case IBV_WC_SEND:
          c.opcode = WcOpcode::kSend;
          break;
        case IBV_WC_RECV_RDMA_WITH_IMM:
          c.opcode = WcOpcode::kRecvWithImm;
          break;
        default:
          c.opcode = WcOpcode::kRecv;
          break;
      }
    }
    return n;
  }

  void DestroyQp(Handle h) override { ibv_destroy_qp(Take<ibv_qp>(h)); }
  void DestroyCq(Handle h) override { ibv_destroy_cq(Take<ibv_cq>(h)); }
  void DeregisterMemory(Handle h) override { ibv_dereg_mr(Take<ibv_mr>(h)); }
  void DeallocPd(Handle h) override { ibv_dealloc_pd(Take<ibv_pd>(h)); }

 private:
  Handle Keep(void* p) {
    absl::MutexLock lock(&mu_);
    Handle h = next_++;
    objects_[h] = p;
    return h;
  }
  template <typename T>
  T* Get(Handle h) {
    absl::MutexLock lock(&mu_);
    return static_cast<T*>(objects_.at(h));
  }
  template <typename T>
  T* Take(Handle h) {
    absl::MutexLock lock(&mu_);
    auto it = objects_.find(h);
    T* p = static_cast<T*>(it->second);
    objects_.erase(it);
    return p;
  }

  ibv_context* ctx_;
  const std::string name_;
  const int port_;
  const int gid_index_;
  absl::Mutex mu_;
  Handle next_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<Handle, void*> objects_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

const char* WcStatusName(WcStatus s) {
  switch (s) {
    case WcStatus::kSuccess:
      return "success";
    case WcStatus::kLocalProtectionError:
      return "local protection error";
    case WcStatus::kRemoteAccessError:
      return "remote access error (bad rkey or out of bounds)";
    case WcStatus::kFlushed:
      return "flushed (queue pair in error)";
    case WcStatus::kRetryExceeded:
      return "transport retry exceeded (peer unreachable)";
    case WcStatus::kGeneralError:
      return "general error";
  }
  return "unknown";
}

absl::StatusOr<VerbsPtr> CreateIbverbs(const std::string& device, int port, int gid_index) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n == 0) {
    if (list != nullptr) ibv_free_device_list(list);
    return absl::UnavailableError(
        absl::StrCat("rdma: no RDMA device found (ibv_get_device_list returned ", n,
                     " devices); use --disaggregation-transfer-backend tcp"));
  }
  ibv_device* chosen = nullptr;
  std::string names;
  for (int i = 0; i < n; ++i) {
    const char* name = ibv_get_device_name(list[i]);
    absl::StrAppend(&names, i ? ", " : "", name);
    if (chosen == nullptr && (device.empty() || device == name)) chosen = list[i];
  }
  if (chosen == nullptr) {
    ibv_free_device_list(list);
    return absl::NotFoundError(
        absl::StrCat("rdma: no device named '", device, "' (devices: ", names, ")"));
  }
  std::string name = ibv_get_device_name(chosen);
  ibv_context* ctx = ibv_open_device(chosen);
  ibv_free_device_list(list);
  if (ctx == nullptr) return Errno("ibv_open_device");
  return VerbsPtr(new Ibverbs(ctx, std::move(name), port, gid_index));
}

}  // namespace tandem::kv::rdma
