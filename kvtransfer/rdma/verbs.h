// A thin interface over the verbs calls the rdma backend makes, so that its logic runs against
// either libibverbs (CreateIbverbs) or an in-process emulation (fake_verbs.h) in tests.
//
// One Verbs object is bound to one opened device. Resources are named by opaque handles, owned by
// the Verbs object; Destroy* releases them. Types mirror libibverbs's minimally (the rdma backend
// uses RC queue pairs, RDMA WRITE, WRITE_WITH_IMM and SEND). Implementations are thread-safe for
// concurrent calls on different queue pairs / completion queues.
#ifndef TANDEM_KVTRANSFER_RDMA_VERBS_H_
#define TANDEM_KVTRANSFER_RDMA_VERBS_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tandem::kv::rdma {

using Handle = uint64_t;

struct PortInfo {
  uint16_t lid = 0;
  std::array<uint8_t, 16> gid{};
  int active_mtu = 1024;  // bytes
  uint32_t max_msg_size = 1u << 30;
};

struct MemoryRegistration {
  Handle handle = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
};

struct QueuePair {
  Handle handle = 0;
  uint32_t qp_num = 0;
};

// What each side of an RC connection tells the other (carried over the control channel).
struct QpAddress {
  uint32_t qp_num = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;
  std::array<uint8_t, 16> gid{};
  int mtu = 1024;
};

enum class WcStatus {
  kSuccess,
  kLocalProtectionError,
  kRemoteAccessError,
  kFlushed,
  kRetryExceeded,
  kGeneralError
};
enum class WcOpcode { kRdmaWrite, kSend, kRecv, kRecvWithImm };

struct WorkCompletion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kRdmaWrite;
  uint32_t qp_num = 0;
  uint32_t imm = 0;
  uint32_t byte_len = 0;
};

struct SendRequest {
  enum Opcode { kWrite, kWriteWithImm, kSend } opcode = kWrite;
  uint64_t wr_id = 0;
  uint64_t local_addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
  uint64_t remote_addr = 0;  // kWrite*
  uint32_t rkey = 0;         // kWrite*
  uint32_t imm = 0;          // kWriteWithImm
  bool signaled = false;
};

const char* WcStatusName(WcStatus s);

class Verbs {
 public:
  virtual ~Verbs() = default;

  virtual std::string device_name() const = 0;
  virtual absl::StatusOr<PortInfo> QueryPort() = 0;
  virtual absl::StatusOr<Handle> AllocPd() = 0;
  // Registers [addr, addr+length) for local write and remote write.
  virtual absl::StatusOr<MemoryRegistration> RegisterMemory(Handle pd, void* addr,
                                                            uint64_t length) = 0;
  virtual absl::StatusOr<Handle> CreateCq(int entries) = 0;
  virtual absl::StatusOr<QueuePair> CreateQp(Handle pd, Handle cq, int max_send_wr,
                                             int max_recv_wr) = 0;
  // RESET -> INIT -> RTR (toward `remote`) -> RTS with our `local_psn`.
  virtual absl::Status ConnectQp(Handle qp, uint32_t local_psn, const QpAddress& remote) = 0;
  // Posts a chain of work requests (one doorbell).
  virtual absl::Status PostSend(Handle qp, absl::Span<const SendRequest> chain) = 0;
  virtual absl::Status PostRecv(Handle qp, uint64_t wr_id, uint64_t addr, uint32_t length,
                                uint32_t lkey) = 0;
  // Up to out.size() completions; 0 when none is ready.
  virtual absl::StatusOr<int> PollCq(Handle cq, absl::Span<WorkCompletion> out) = 0;
  virtual void DestroyQp(Handle qp) = 0;
  virtual void DestroyCq(Handle cq) = 0;
  virtual void DeregisterMemory(Handle mr) = 0;
  virtual void DeallocPd(Handle pd) = 0;
};

using VerbsPtr = std::unique_ptr<Verbs>;

// Opens the first RDMA device (or `device` by name) through libibverbs. Fails with a message
// naming the cause and the tcp fallback when the machine has no device.
absl::StatusOr<VerbsPtr> CreateIbverbs(const std::string& device = "", int port = 1,
                                       int gid_index = 0);

}  // namespace tandem::kv::rdma

#endif  // TANDEM_KVTRANSFER_RDMA_VERBS_H_
