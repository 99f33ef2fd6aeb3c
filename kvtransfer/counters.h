// Lock-free counters behind EngineStats; shared by the backends. Thread-safe.
#ifndef TANDEM_KVTRANSFER_COUNTERS_H_
#define TANDEM_KVTRANSFER_COUNTERS_H_

#include <atomic>

#include "kvtransfer/transfer_engine.h"

namespace tandem::kv {

struct EngineCounters {
  std::atomic<uint64_t> writes_applied{0};
  std::atomic<uint64_t> bytes_applied{0};
  std::atomic<uint64_t> writes_rejected{0};
  std::atomic<uint64_t> frames_dropped{0};
  std::atomic<uint64_t> handshakes_rejected{0};
  std::atomic<uint64_t> notifications_received{0};

  EngineStats Snapshot() const {
    EngineStats s;
    s.writes_applied = writes_applied.load();
    s.bytes_applied = bytes_applied.load();
    s.writes_rejected = writes_rejected.load();
    s.frames_dropped = frames_dropped.load();
    s.handshakes_rejected = handshakes_rejected.load();
    s.notifications_received = notifications_received.load();
    return s;
  }
};

// True for the 1st, 2nd, 4th, 8th... event: logs about floods stay readable.
inline bool ShouldLogNth(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_COUNTERS_H_
