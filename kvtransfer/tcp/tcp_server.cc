#include "kvtransfer/tcp/tcp_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "kvtransfer/auth.h"
#include "kvtransfer/frame.h"

namespace tandem::kv {
namespace {

// The generic reasons an unauthenticated peer may be told: they say what it did wrong, never
// what this engine holds.
constexpr char kMalformedHello[] = "malformed hello";
constexpr char kTooManyPending[] = "too many pending handshakes";
constexpr char kAuthFailed[] = "authentication failed";

// The peer's address as the kernel reported it to ZMQ (no port), or "" when the transport has
// none (inproc) or the library does not provide it. The frames the peer sent carry it; the
// routing-id frame the ROUTER adds does not in every libzmq release, so every part is asked.
std::string PeerAddress(const std::vector<zmq::message_t>& parts) {
  for (const zmq::message_t& m : parts) {
    const char* address = zmq_msg_gets(m.handle(), "Peer-Address");
    if (address != nullptr) return std::string(address);
  }
  return std::string();
}

std::string ForLog(const std::string& source) { return source.empty() ? "?" : source; }

}  // namespace

absl::Status ValidateConnectionLimits(const ConnectionLimits& limits) {
  if (limits.max_pending_handshakes < 1 || limits.max_pending_per_source < 1 ||
      limits.max_sessions < 1 || limits.pending_handshake_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "connection limits must be positive (handshakes, per source, sessions, timeout)");
  }
  return absl::OkStatus();
}

void RefusalLog::Warn(const std::string& line) {
  if (!every_.Allow()) {
    ++suppressed_;
    ++suppressed_total_;
    return;
  }
  ++lines_;
  if (suppressed_ == 0) {
    spdlog::warn("{}", line);
  } else {
    spdlog::warn("{} [{} more not logged since the last such line]", line, suppressed_);
  }
  suppressed_ = 0;
}

TcpServer::TcpServer(const EngineOptions& options, const RegionTable* regions,
                     EngineCounters* counters, ControlHandler on_control, Clock clock)
    : options_(options),
      regions_(regions),
      counters_(counters),
      on_control_(std::move(on_control)),
      clock_(std::move(clock)),
      pending_(options.connection_limits.max_pending_handshakes,
               options.connection_limits.max_pending_per_source,
               absl::ToChronoNanoseconds(options.connection_limits.pending_handshake_timeout)),
      handshake_log_(options.connection_limits.refusal_log_interval),
      drop_log_(options.connection_limits.refusal_log_interval) {}

void TcpServer::HandleMessage(zmq::socket_t& router, std::vector<zmq::message_t>& parts) {
  // Every client frame is [routing id][header][body].
  if (parts.size() != 3) {
    return Drop(PeerAddress(parts), absl::StrCat("message with ", parts.size(), " parts"));
  }
  const std::string rid = parts[0].to_string();
  auto header = ParseHeader(parts[1].data(), parts[1].size());
  if (!header.ok()) return Drop(PeerAddress(parts), std::string(header.status().message()));
  const FrameHeader& h = *header;
  if (h.type == FrameType::kHello) return OnHello(router, rid, PeerAddress(parts), parts[2]);
  if (h.type == FrameType::kAuth) return OnAuth(router, rid, PeerAddress(parts), parts[2]);
  auto it = sessions_.find(rid);
  if (it == sessions_.end() || h.session != it->second.id) {
    return Drop(PeerAddress(parts),
                absl::StrCat(FrameTypeName(h.type), " frame from an unauthenticated connection"));
  }
  Session& s = it->second;
  s.last_active = clock_();
  switch (h.type) {
    case FrameType::kWrite:
      return OnWrite(router, rid, s, h, parts[2]);
    case FrameType::kWriteMulti:
      return OnWriteMulti(router, rid, s, h, parts[2]);
    case FrameType::kFlush: {
      FrameHeader ack;
      ack.type = FrameType::kAck;
      ack.batch = h.batch;
      return Reply(router, rid, ack, "");
    }
    case FrameType::kNotify: {
      if (parts[2].size() > kMaxNotifyBytes) {
        return Drop(PeerAddress(parts), "oversized notification");
      }
      counters_->notifications_received++;
      if (options_.on_notification) options_.on_notification(s.client_name, parts[2].to_string());
      FrameHeader ack;
      ack.type = FrameType::kNotifyAck;
      ack.batch = h.batch;
      return Reply(router, rid, ack, "");
    }
    case FrameType::kControl: {
      absl::StatusOr<std::string> reply =
          on_control_ ? on_control_(s.client_name, parts[2].to_string())
                      : absl::UnimplementedError("this engine takes no control requests");
      FrameHeader r;
      r.batch = h.batch;
      if (reply.ok()) {
        r.type = FrameType::kControlReply;
        return Reply(router, rid, r, *reply);
      }
      r.type = FrameType::kNack;
      r.code = static_cast<uint32_t>(reply.status().code());
      return Reply(router, rid, r,
                   std::string(reply.status().message()).substr(0, kMaxReasonBytes));
    }
    case FrameType::kBye:
      sessions_.erase(it);
      return;
    default:
      return Drop(PeerAddress(parts),
                  absl::StrCat("unexpected ", FrameTypeName(h.type), " frame from a client"));
  }
}

void TcpServer::OnHello(zmq::socket_t& router, const std::string& rid, const std::string& source,
                        const zmq::message_t& body) {
  // Checked before copying: a stranger's oversized body costs no more than ZMQ already paid.
  if (body.size() > kMaxHelloBytes) {
    return Refuse(router, rid, source, absl::StatusCode::kInvalidArgument, kMalformedHello,
                  absl::StrCat("hello of ", body.size(), " bytes"));
  }
  auto hello = DecodeHello(body.to_string());
  if (!hello.ok()) {
    return Refuse(router, rid, source, absl::StatusCode::kInvalidArgument, kMalformedHello,
                  std::string(hello.status().message()));
  }
  // A connection that starts over gives up what it had; no other connection's state is touched.
  sessions_.erase(rid);
  auto entry = pending_.Admit(rid, source, clock_());
  if (!entry.ok()) {
    return Refuse(router, rid, source, absl::StatusCode::kResourceExhausted, kTooManyPending,
                  std::string(entry.status().message()));
  }
  // The compatibility record waits until the peer has proven it is a member (OnAuth): telling a
  // stranger which field differs would let it read our record one probe at a time.
  PendingHandshake& p = **entry;
  p.client_nonce = std::move(hello->client_nonce);
  p.server_nonce = MakeNonce();
  p.client_name = std::move(hello->client_name);
  p.compat = std::move(hello->compat);
  ChallengeBody challenge;
  challenge.server_nonce = p.server_nonce;
  challenge.server_name = options_.name;
  challenge.server_proof = ComputeProof(options_.cluster_secret, AuthRole::kServer, p.client_nonce,
                                        p.server_nonce, p.client_name, options_.name);
  FrameHeader h;
  h.type = FrameType::kChallenge;
  Reply(router, rid, h, EncodeChallenge(challenge));
}

void TcpServer::OnAuth(zmq::socket_t& router, const std::string& rid, const std::string& source,
                       const zmq::message_t& body) {
  const MonoClock::time_point now = clock_();
  std::optional<PendingHandshake> p = pending_.Take(rid, now);
  if (!p) return Drop(source, "auth frame without a handshake in progress (or it expired)");
  const bool proof_ok =
      body.size() == kProofSize &&
      ProofEquals(body.to_string(),
                  ComputeProof(options_.cluster_secret, AuthRole::kClient, p->client_nonce,
                               p->server_nonce, p->client_name, options_.name));
  if (!proof_ok) {
    return Refuse(router, rid, source, absl::StatusCode::kPermissionDenied, kAuthFailed,
                  "wrong proof (cluster secret mismatch?)");
  }
  // A member now: it may learn exactly what differs. The reason is worded from the peer's side
  // ("local" is the peer), as its own descriptor check would say it; the log line from ours.
  if (absl::Status compat = CheckCompatible(p->compat, options_.compat); !compat.ok()) {
    counters_->handshakes_rejected++;
    handshake_log_.Warn(absl::StrCat("kv tcp: refused member '", p->client_name, "' from ",
                                     ForLog(source), ": ",
                                     CheckCompatible(options_.compat, p->compat).message()));
    return Reject(router, rid, compat.code(), std::string(compat.message()));
  }
  if (sessions_.size() >= std::max<size_t>(1, options_.connection_limits.max_sessions)) {
    EvictIdlestSession(router);
  }
  Session& s = sessions_[rid];
  s.client_name = std::move(p->client_name);
  s.id = MakeSessionId();
  s.last_active = now;
  FrameHeader h;
  h.type = FrameType::kWelcome;
  h.session = s.id;
  Reply(router, rid, h, "");
}

void TcpServer::EvictIdlestSession(zmq::socket_t& router) {
  // Only members get here, so this is churn, not an attack. The server never learns that a
  // connection closed without kBye (a crashed peer), so refusing newcomers at the cap would let
  // dead sessions lock members out for good; the session idle longest is the likeliest dead one.
  // It is told (kReject), so a live owner fails that peer at once and imports it again instead
  // of waiting for its batches' deadlines.
  auto idlest = std::min_element(
      sessions_.begin(), sessions_.end(),
      [](const auto& a, const auto& b) { return a.second.last_active < b.second.last_active; });
  if (idlest == sessions_.end()) return;
  handshake_log_.Warn(absl::StrCat("kv tcp: ", sessions_.size(),
                                   " sessions open (the limit); closing the one idle longest, of '",
                                   idlest->second.client_name, "'"));
  Reject(router, idlest->first, absl::StatusCode::kResourceExhausted,
         "session closed: the peer has too many sessions; connect again");
  sessions_.erase(idlest);
}

void TcpServer::OnWrite(zmq::socket_t& router, const std::string& rid, const Session& s,
                        const FrameHeader& h, const zmq::message_t& body) {
  absl::StatusOr<uint8_t*> dst;
  if (h.length != body.size()) {
    dst = absl::InvalidArgumentError(
        absl::StrCat("write header says ", h.length, " bytes, payload has ", body.size()));
  } else {
    dst = regions_->CheckIncomingWrite(s.client_name, h.region, h.offset, h.length);
  }
  if (!dst.ok()) return Nack(router, rid, s, h, dst.status());
  std::memcpy(*dst, body.data(), h.length);
  counters_->writes_applied++;
  counters_->bytes_applied += h.length;
  if (h.flags & kFlagAck) {
    FrameHeader ack;
    ack.type = FrameType::kAck;
    ack.batch = h.batch;
    Reply(router, rid, ack, "");
  }
}

void TcpServer::OnWriteMulti(zmq::socket_t& router, const std::string& rid, const Session& s,
                             const FrameHeader& h, const zmq::message_t& body) {
  absl::StatusOr<std::vector<PackedWrite>> writes;
  if (h.length != body.size()) {
    writes = absl::InvalidArgumentError(
        absl::StrCat("write_multi header says ", h.length, " bytes, payload has ", body.size()));
  } else {
    writes = ParsePackedWrites(body.data(), body.size());
  }
  // Check every write first: a frame is applied whole or not at all.
  std::vector<uint8_t*> dst;
  absl::Status status = writes.status();
  if (status.ok()) {
    dst.reserve(writes->size());
    for (const PackedWrite& w : *writes) {
      auto d = regions_->CheckIncomingWrite(s.client_name, w.region, w.offset, w.length);
      if (!d.ok()) {
        status = d.status();
        break;
      }
      dst.push_back(*d);
    }
  }
  if (!status.ok()) return Nack(router, rid, s, h, status);
  for (size_t i = 0; i < dst.size(); ++i) {
    std::memcpy(dst[i], (*writes)[i].data, (*writes)[i].length);
  }
  counters_->writes_applied += dst.size();
  counters_->bytes_applied += h.length - 4 - kPackedEntryBytes * dst.size();
  if (h.flags & kFlagAck) {
    FrameHeader ack;
    ack.type = FrameType::kAck;
    ack.batch = h.batch;
    Reply(router, rid, ack, "");
  }
}

void TcpServer::Nack(zmq::socket_t& router, const std::string& rid, const Session& s,
                     const FrameHeader& h, const absl::Status& why) {
  uint64_t n = ++counters_->writes_rejected;
  if (ShouldLogNth(n)) {
    spdlog::warn("kv tcp: rejected write from '{}' (batch {}): {} [{} rejected so far]",
                 s.client_name, h.batch, std::string(why.message()), n);
  }
  FrameHeader nack;
  nack.type = FrameType::kNack;
  nack.flags = h.flags & kFlagAck;
  nack.batch = h.batch;
  nack.code = static_cast<uint32_t>(why.code());
  std::string reason(why.message());
  if (reason.size() > kMaxReasonBytes) reason.resize(kMaxReasonBytes);
  Reply(router, rid, nack, reason);
}

void TcpServer::Reply(zmq::socket_t& router, const std::string& rid, const FrameHeader& h,
                      const std::string& body) {
  auto header = EncodeHeader(h);
  // A full or vanished peer loses the reply; its batch then fails at its deadline.
  auto sent = router.send(zmq::buffer(rid), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  if (!sent) return;
  router.send(zmq::buffer(header.data(), header.size()),
              zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  router.send(zmq::buffer(body), zmq::send_flags::dontwait);
}

void TcpServer::Refuse(zmq::socket_t& router, const std::string& rid, const std::string& source,
                       absl::StatusCode code, const std::string& reason,
                       const std::string& detail) {
  counters_->handshakes_rejected++;
  handshake_log_.Warn(absl::StrCat("kv tcp: refused a handshake from ", ForLog(source), ": ",
                                   reason, " (", detail, ") [",
                                   counters_->handshakes_rejected.load(), " refused so far]"));
  Reject(router, rid, code, reason);
}

void TcpServer::Reject(zmq::socket_t& router, const std::string& rid, absl::StatusCode code,
                       const std::string& reason) {
  FrameHeader h;
  h.type = FrameType::kReject;
  h.code = static_cast<uint32_t>(code);
  Reply(router, rid, h, reason.substr(0, kMaxReasonBytes));
}

void TcpServer::Drop(const std::string& source, const std::string& why) {
  uint64_t n = ++counters_->frames_dropped;
  drop_log_.Warn(absl::StrCat("kv tcp: dropped a frame from ", ForLog(source), ": ", why, " [", n,
                              " dropped so far]"));
}

}  // namespace tandem::kv
