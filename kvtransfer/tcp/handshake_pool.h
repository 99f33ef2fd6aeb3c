// The server's handshakes in progress: connections whose Hello was answered with a challenge and
// whose Auth has not arrived yet. Anyone who can reach the endpoint can put one here, so the pool
// is bounded in total and per source address, and each entry expires a fixed time after its
// Hello. It is kept apart from the authenticated sessions: a full pool refuses the newcomer and
// never evicts anything, so a flood of Hellos can delay new members but never displace one.
//
// Expiry is lazy (Admit and Take drop what is overdue); the clock is the caller's monotonic time.
// Memory: at most `max_total` entries, each bounded by the Hello's limits (name, compatibility
// record; see kMaxHelloBytes).
// Not thread-safe: owned by the server's I/O thread.
#ifndef TANDEM_KVTRANSFER_TCP_HANDSHAKE_POOL_H_
#define TANDEM_KVTRANSFER_TCP_HANDSHAKE_POOL_H_

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "kvtransfer/descriptor.h"

namespace tandem::kv {

struct PendingHandshake {
  std::string source;  // the peer's address as the transport reports it; "" when unknown
  MonoClock::time_point expires;
  std::string client_nonce;
  std::string server_nonce;
  std::string client_name;     // as claimed in the Hello; proven only by the Auth
  CompatibilityRecord compat;  // checked only once the peer authenticated
};

class HandshakePool {
 public:
  // Caps below 1 are raised to 1.
  HandshakePool(size_t max_total, size_t max_per_source, MonoClock::duration timeout);
  HandshakePool(const HandshakePool&) = delete;
  HandshakePool& operator=(const HandshakePool&) = delete;

  // Admits a handshake for connection `rid` from `source` at `now`, after dropping expired ones.
  // A handshake `rid` already had is replaced (it does not count twice). ResourceExhausted when
  // the pool or the source's share of it is full; nothing is evicted then. The returned entry has
  // `source` and `expires` set; the caller fills the rest. It stays valid until the next call.
  absl::StatusOr<PendingHandshake*> Admit(const std::string& rid, const std::string& source,
                                          MonoClock::time_point now);

  // Removes and returns `rid`'s handshake; nullopt if it has none or it expired by `now`.
  std::optional<PendingHandshake> Take(const std::string& rid, MonoClock::time_point now);

  // Drops every handshake whose deadline is at or before `now`; returns how many.
  size_t Expire(MonoClock::time_point now);

  size_t size() const { return by_rid_.size(); }
  // Handshakes in progress from `source`.
  size_t from_source(const std::string& source) const;

 private:
  using Map = std::map<std::string, PendingHandshake>;
  // Removes the entry from by_expiry_ and per_source_ (not from by_rid_).
  void Unindex(const std::string& rid, const PendingHandshake& entry);
  void Erase(Map::iterator it);

  const size_t max_total_;
  const size_t max_per_source_;
  const MonoClock::duration timeout_;
  Map by_rid_;
  // (deadline, rid) of every entry, oldest first: expiry looks only at the front.
  std::set<std::pair<MonoClock::time_point, std::string>> by_expiry_;
  std::map<std::string, size_t> per_source_;  // sources with at least one entry
};

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_TCP_HANDSHAKE_POOL_H_
