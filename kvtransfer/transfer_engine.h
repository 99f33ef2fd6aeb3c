// The KV transfer engine: moves bytes from registered memory regions of this process into
// registered memory regions of a peer process. It knows regions and offsets, not tensors.
//
// Engine state machine (EngineState):
//   kConfiguring --Start()--> kServing --Shutdown()/destructor--> kStopped
//   In kConfiguring the owner registers its memory regions (RegisterRegion). Start() binds the
//   endpoint(s) and freezes the region set; from then on ExportDescriptor() describes them.
//   In kServing the owner imports peers' descriptors (ImportPeer: connect, authenticate with the
//   cluster secret, check the compatibility record), opens windows for restricted regions, submits
//   write batches and sends notifications.
//
// Batch state machine (BatchState):
//   kPending --(first byte handed to the network)--> kInProgress --> kCompleted
//   kPending|kInProgress --> kFailed (reason) | kTimedOut (deadline passed) | kCancelled (Cancel)
//   kCompleted means every byte was applied at the destination and acknowledged by it, not that
//   it left this process. kCompleted, kFailed, kTimedOut and kCancelled are terminal. After
//   kCancelled or kTimedOut the destination may hold any prefix of the batch's bytes.
//
// Memory lifetime rule: a registered region must stay valid and mapped until the engine that
// registered it is destroyed. Backends send straight from registered memory (no copy), and a
// cancelled or timed-out batch may still be read by the network until the engine stops.
// The source bytes of a batch must not change until the batch is terminal.
//
// Control plane (ControlPlane: regions, descriptors, peers, windows, notifications) and data
// plane (DataPlane: batched writes and their completion) are separate interfaces; a
// TransferEngine is both. All methods are thread-safe. Callbacks (completion, notification) run
// on an engine thread: they must be short and must not call Wait() on the same engine.
#ifndef TANDEM_KVTRANSFER_TRANSFER_ENGINE_H_
#define TANDEM_KVTRANSFER_TRANSFER_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kvtransfer/descriptor.h"

namespace tandem::kv {

enum class EngineState { kConfiguring, kServing, kStopped };

enum class BatchState { kPending, kInProgress, kCompleted, kFailed, kTimedOut, kCancelled };

// "pending", "in_progress", ... for logs and errors.
const char* BatchStateName(BatchState state);
inline bool IsTerminal(BatchState s) {
  return s != BatchState::kPending && s != BatchState::kInProgress;
}

// Identifies one batch (or one notification) within an engine; never reused.
using BatchId = uint64_t;
// Identifies an imported peer within an engine; never reused.
using PeerId = uint64_t;
// Identifies an open write window within an engine.
using WindowId = uint64_t;

// One write: `length` bytes from local region `local_region` at `local_offset` to the peer's
// region `remote_region` at `remote_offset`.
struct WriteOp {
  RegionId local_region = 0;
  uint64_t local_offset = 0;
  RegionId remote_region = 0;
  uint64_t remote_offset = 0;
  uint64_t length = 0;
};

// The state of a batch as seen by Poll()/Wait()/callbacks.
struct BatchStatus {
  BatchState state = BatchState::kPending;
  absl::Status error;        // why, for kFailed / kTimedOut / kCancelled; OK otherwise
  uint64_t bytes_total = 0;  // sum of the batch's write lengths (0 for a notification)
  uint64_t bytes_acked = 0;  // bytes the destination acknowledged as applied
};

using CompletionCallback = std::function<void(BatchId, const BatchStatus&)>;

struct SubmitOptions {
  // The batch becomes kTimedOut if it is not kCompleted by then.
  absl::Time deadline = absl::InfiniteFuture();
  // Called once when the batch becomes terminal; the engine then forgets the batch (no Release
  // needed). Without a callback, the owner calls Release() after observing a terminal state.
  CompletionCallback on_done;
};

// Submit's result: "no room" (too much queued for that peer; retry later) is not an error.
struct SubmitResult {
  bool accepted = false;
  BatchId id = 0;  // valid when accepted
};

// A registered memory region. The memory is owned by the caller (see the lifetime rule above).
struct LocalRegion {
  RegionId id = 0;
  void* base = nullptr;
  uint64_t size = 0;
  // When true, peers may write only inside windows opened with OpenWindow for them.
  bool restricted = false;
};

// Counters for operators and tests (monotonic since Start()).
struct EngineStats {
  uint64_t writes_applied = 0;  // incoming writes copied into registered memory
  uint64_t bytes_applied = 0;
  uint64_t writes_rejected = 0;      // incoming writes refused (bounds, region, window)
  uint64_t frames_dropped = 0;       // malformed or unauthenticated frames dropped
  uint64_t handshakes_rejected = 0;  // malformed, refused (limits), failed auth or compatibility
  uint64_t notifications_received = 0;
};

// What the receiving side (the tcp backend's server, the rdma backend's control channel) keeps for
// the connections reaching its endpoint. Anyone who can reach the port can start a handshake, so
// these bound what a stranger can make the engine hold; members are never displaced by strangers.
struct ConnectionLimits {
  // Handshakes in progress (Hello answered, Auth not yet received), in total and per peer address
  // (per-address only when the transport reports one). A Hello beyond either is refused with
  // "too many pending handshakes"; nothing already admitted is evicted.
  size_t max_pending_handshakes = 256;
  size_t max_pending_per_source = 32;
  // A handshake not completed this long after its Hello is forgotten (checked on each new Hello
  // and on its Auth).
  absl::Duration pending_handshake_timeout = absl::Seconds(10);
  // Authenticated connections. Only members reach this: beyond it, the one idle longest is closed.
  size_t max_sessions = 4096;
  // Refused handshakes and dropped frames are logged at most once per interval each, with the
  // number of them not logged since the previous line.
  absl::Duration refusal_log_interval = absl::Seconds(1);
};

// Receives a peer's notification: the peer's engine name and the message bytes.
using NotificationHandler = std::function<void(const std::string& peer, const std::string& msg)>;

struct EngineOptions {
  // This engine's name, unique in the cluster (e.g. "prefill-0"); peers see it in notifications
  // and windows name it.
  std::string name;
  // Shared cluster secret (at least 16 bytes). Peers prove they know it before any write lands.
  std::string cluster_secret;
  // What this engine's memory holds; peers must match it exactly.
  CompatibilityRecord compat;
  // Where to listen: host or IP (tcp, rdma control channel), "*" binds all interfaces.
  std::string listen_host = "127.0.0.1";
  int listen_port = 0;             // 0 picks an ephemeral port
  std::string advertise_host;      // host peers connect to; defaults to listen_host
  int lanes = 4;                   // connections (tcp) or queue pairs (rdma) per peer
  uint64_t slice_bytes = 1 << 20;  // large writes are cut into slices of this size
  uint64_t max_queued_bytes_per_peer = 1ull << 30;  // beyond this Submit says "no room"
  absl::Duration handshake_timeout = absl::Seconds(5);
  absl::Duration heartbeat_interval = absl::Seconds(1);  // a silent peer is declared dead after 3
  NotificationHandler on_notification;
  // tcp and rdma: bounds on the connections the endpoint keeps state for.
  ConnectionLimits connection_limits;
  // rdma only: device name ("" = first device), port, GID index.
  std::string rdma_device;
  int rdma_port = 1;
  int rdma_gid_index = 0;
  // fake only: delay applied to every write, and a failure injected into every N-th batch (0=off).
  absl::Duration fake_delay = absl::ZeroDuration();
  int fake_fail_every = 0;
};

// Data plane: batched writes and their completion.
class DataPlane {
 public:
  virtual ~DataPlane() = default;

  // Queues `ops` for `peer` without blocking. Errors: unknown/dead peer, an op outside a local
  // region or (as far as the descriptor says) outside a remote region, an empty batch.
  // Returns {accepted=false} when the peer's queue is full ("no room").
  virtual absl::StatusOr<SubmitResult> Submit(PeerId peer, absl::Span<const WriteOp> ops,
                                              SubmitOptions options) = 0;
  // The batch's current status; NotFound for an unknown or released id.
  virtual absl::StatusOr<BatchStatus> Poll(BatchId id) = 0;
  // Blocks until the batch is terminal or `until` passes, then returns its status (possibly
  // still kPending/kInProgress: that is an ordinary result).
  virtual absl::StatusOr<BatchStatus> Wait(BatchId id, absl::Time until) = 0;
  // Moves a non-terminal batch to kCancelled: unsent slices are dropped. No-op when terminal.
  virtual absl::Status Cancel(BatchId id) = 0;
  // Forgets a terminal batch; FailedPrecondition while it is still running.
  virtual absl::Status Release(BatchId id) = 0;
};

// Control plane: regions, descriptors, peers, windows, notifications.
class ControlPlane {
 public:
  virtual ~ControlPlane() = default;

  virtual EngineState state() const = 0;
  // kConfiguring only. Region ids are unique; regions must not overlap.
  virtual absl::Status RegisterRegion(const LocalRegion& region) = 0;
  // kConfiguring -> kServing: binds the endpoint(s).
  virtual absl::Status Start() = 0;
  // kServing only: the encoded descriptor (opaque bytes) a peer passes to ImportPeer.
  virtual absl::StatusOr<std::string> ExportDescriptor() = 0;
  // Connects to the peer described by `descriptor`, authenticates both ways with the cluster
  // secret and checks the compatibility records. Blocks up to the handshake timeout. Errors:
  // FAILED_PRECONDITION for incompatible records (naming the field and both values, whichever
  // side found it), PERMISSION_DENIED for a secret mismatch, RESOURCE_EXHAUSTED when the peer has
  // too many handshakes in progress (retry later), DEADLINE_EXCEEDED when it does not answer.
  virtual absl::StatusOr<PeerId> ImportPeer(const std::string& descriptor) = 0;
  // Disconnects; the peer's running batches fail.
  virtual absl::Status RemovePeer(PeerId peer) = 0;
  // OK while `peer` can take batches; Unavailable (with the reason) once its connection was lost
  // and it was declared dead (it is never reconnected: import its descriptor again), NotFound for
  // an unknown or removed peer.
  virtual absl::Status CheckPeer(PeerId peer) const = 0;
  // Lets the peer named `peer_name` write [offset, offset+length) of restricted region `region`.
  virtual absl::StatusOr<WindowId> OpenWindow(const std::string& peer_name, RegionId region,
                                              uint64_t offset, uint64_t length) = 0;
  virtual absl::Status CloseWindow(WindowId window) = 0;
  // Sends `message` (at most kMaxNotifyBytes) to `peer`; it is delivered only after every write
  // of every earlier batch to that peer that reached the network was applied or rejected there.
  // It does not imply those batches succeeded: check their states. Progress is observed like a
  // batch (DataPlane::Poll/Wait/Release with the returned id); kCompleted = delivered.
  virtual absl::StatusOr<BatchId> Notify(PeerId peer, const std::string& message,
                                         SubmitOptions options) = 0;
  virtual EngineStats stats() const = 0;
  // Stops all threads and fails running batches; idempotent.
  virtual void Shutdown() = 0;
};

inline constexpr size_t kMaxNotifyBytes = 64 * 1024;

// A transfer engine: both planes. Not copyable.
class TransferEngine : public ControlPlane, public DataPlane {
 public:
  TransferEngine() = default;
  TransferEngine(const TransferEngine&) = delete;
  TransferEngine& operator=(const TransferEngine&) = delete;
  ~TransferEngine() override = default;
};

using TransferEnginePtr = std::unique_ptr<TransferEngine>;

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_TRANSFER_ENGINE_H_
