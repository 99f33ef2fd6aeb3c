#include "kvtransfer/tcp/tcp_server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kvtransfer/auth.h"
#include "kvtransfer/frame.h"

namespace tandem::kv {

void TcpServer::HandleMessage(zmq::socket_t& router, std::vector<zmq::message_t>& parts) {
  // Every client frame is [routing id][header][body].
  if (parts.size() != 3) return Drop(absl::StrCat("message with ", parts.size(), " parts"));
  const std::string rid = parts[0].to_string();
  auto header = ParseHeader(parts[1].data(), parts[1].size());
  if (!header.ok()) return Drop(std::string(header.status().message()));
  const FrameHeader& h = *header;
  if (h.type == FrameType::kHello) return OnHello(router, rid, parts[2].to_string());
  auto it = sessions_.find(rid);
  if (it == sessions_.end()) {
    return Drop(absl::StrCat(FrameTypeName(h.type), " frame from an unknown connection"));
  }
  Session& s = it->second;
  if (h.type == FrameType::kAuth) return OnAuth(router, rid, parts[2].to_string());
  if (s.state != SessionState::kAuthenticated || h.session != s.id) {
    return Drop(absl::StrCat(FrameTypeName(h.type), " frame from unauthenticated connection"));
  }
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
      if (parts[2].size() > kMaxNotifyBytes) return Drop("oversized notification");
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
      session_order_.erase(std::remove(session_order_.begin(), session_order_.end(), rid),
                           session_order_.end());
      return;
    default:
      return Drop(absl::StrCat("unexpected ", FrameTypeName(h.type), " frame from a client"));
  }
}

void TcpServer::OnHello(zmq::socket_t& router, const std::string& rid, const std::string& body) {
  auto hello = DecodeHello(body);
  if (!hello.ok()) {
    counters_->handshakes_rejected++;
    return Reject(router, rid, std::string(hello.status().message()));
  }
  absl::Status compat = CheckCompatible(options_.compat, hello->compat);
  if (!compat.ok()) {
    counters_->handshakes_rejected++;
    spdlog::warn("kv tcp: rejected peer '{}': {}", hello->client_name,
                 std::string(compat.message()));
    return Reject(router, rid, std::string(compat.message()));
  }
  if (sessions_.find(rid) == sessions_.end()) {
    if (sessions_.size() >= kMaxSessions) {
      sessions_.erase(session_order_.front());
      session_order_.pop_front();
    }
    session_order_.push_back(rid);
  }
  Session& s = sessions_[rid];
  s = Session{};
  s.client_nonce = hello->client_nonce;
  s.server_nonce = MakeNonce();
  s.client_name = hello->client_name;
  ChallengeBody challenge;
  challenge.server_nonce = s.server_nonce;
  challenge.server_name = options_.name;
  challenge.server_proof = ComputeProof(options_.cluster_secret, AuthRole::kServer, s.client_nonce,
                                        s.server_nonce, s.client_name, options_.name);
  FrameHeader h;
  h.type = FrameType::kChallenge;
  Reply(router, rid, h, EncodeChallenge(challenge));
}

void TcpServer::OnAuth(zmq::socket_t& router, const std::string& rid, const std::string& body) {
  Session& s = sessions_[rid];
  std::string expected = ComputeProof(options_.cluster_secret, AuthRole::kClient, s.client_nonce,
                                      s.server_nonce, s.client_name, options_.name);
  if (s.state != SessionState::kChallenged || !CheckAuthBody(body).ok() ||
      !ProofEquals(body, expected)) {
    counters_->handshakes_rejected++;
    spdlog::warn("kv tcp: authentication failed for a connection claiming to be '{}'",
                 s.client_name);
    sessions_.erase(rid);
    session_order_.erase(std::remove(session_order_.begin(), session_order_.end(), rid),
                         session_order_.end());
    return Reject(router, rid, "authentication failed: cluster secret mismatch");
  }
  s.state = SessionState::kAuthenticated;
  s.id = MakeSessionId();
  FrameHeader h;
  h.type = FrameType::kWelcome;
  h.session = s.id;
  Reply(router, rid, h, "");
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

void TcpServer::Reject(zmq::socket_t& router, const std::string& rid, const std::string& reason) {
  FrameHeader h;
  h.type = FrameType::kReject;
  std::string r = reason.substr(0, kMaxReasonBytes);
  Reply(router, rid, h, r);
}

void TcpServer::Drop(const std::string& why) {
  uint64_t n = ++counters_->frames_dropped;
  if (ShouldLogNth(n)) spdlog::warn("kv tcp: dropped a frame: {} [{} dropped so far]", why, n);
}

}  // namespace tandem::kv
