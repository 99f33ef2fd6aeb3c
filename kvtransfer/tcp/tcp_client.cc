#include "kvtransfer/tcp/tcp_client.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kvtransfer/auth.h"
#include "kvtransfer/frame.h"

namespace tandem::kv {
namespace {

void SendFrame(zmq::socket_t& s, const FrameHeader& h, const std::string& body) {
  auto header = EncodeHeader(h);
  s.send(zmq::buffer(header.data(), header.size()), zmq::send_flags::sndmore);
  s.send(zmq::buffer(body), zmq::send_flags::none);
}

// Receives one [header][body] frame before `deadline`.
absl::StatusOr<std::pair<FrameHeader, std::string>> RecvFrame(zmq::socket_t& s, absl::Time deadline,
                                                              const std::string& what) {
  while (true) {
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("timed out waiting for ", what));
    }
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(absl::ToInt64Milliseconds(left) + 1));
    if (!(item.revents & ZMQ_POLLIN)) continue;
    std::vector<zmq::message_t> parts;
    while (true) {
      zmq::message_t m;
      if (!s.recv(m, zmq::recv_flags::dontwait)) break;
      bool more = m.more();
      if (parts.size() < 3) parts.push_back(std::move(m));
      if (!more) break;
    }
    if (parts.size() != 2) return absl::DataLossError(absl::StrCat("malformed ", what));
    ASSIGN_OR_RETURN(FrameHeader h, ParseHeader(parts[0].data(), parts[0].size()),
                     absl::StrCat(what, ": "));
    return std::make_pair(h, parts[1].to_string());
  }
}

absl::Status CheckNotRejected(const FrameHeader& h, const std::string& body,
                              const ClientOptions& o) {
  if (h.type == FrameType::kReject) {
    // The code tells the caller what to do: retry later (RESOURCE_EXHAUSTED), fix the
    // configuration (FAILED_PRECONDITION: incompatible), or the secret (PERMISSION_DENIED, also
    // what a server that sends no code means).
    auto code = static_cast<absl::StatusCode>(h.code);
    if (h.code == 0 || h.code > 16) code = absl::StatusCode::kPermissionDenied;
    return absl::Status(code,
                        absl::StrCat("peer '", o.peer_name, "' at ", o.endpoint,
                                     " rejected the handshake: ", body.substr(0, kMaxReasonBytes)));
  }
  return absl::OkStatus();
}

absl::Status Handshake(ClientLane& lane, const ClientOptions& o, absl::Time deadline) {
  HelloBody hello{MakeNonce(), o.local_name, o.compat};
  FrameHeader h;
  h.type = FrameType::kHello;
  SendFrame(lane.socket, h, EncodeHello(hello));
  const std::string what = absl::StrCat("the handshake with peer '", o.peer_name, "' at ",
                                        o.endpoint, " (is it running and reachable?)");
  ASSIGN_OR_RETURN(auto reply, RecvFrame(lane.socket, deadline, what));
  RETURN_IF_ERROR(CheckNotRejected(reply.first, reply.second, o));
  if (reply.first.type != FrameType::kChallenge) {
    return absl::DataLossError(absl::StrCat("peer '", o.peer_name, "' answered hello with ",
                                            FrameTypeName(reply.first.type)));
  }
  ASSIGN_OR_RETURN(ChallengeBody challenge, DecodeChallenge(reply.second));
  if (challenge.server_name != o.peer_name) {
    return absl::PermissionDeniedError(absl::StrCat("endpoint ", o.endpoint, " is engine '",
                                                    challenge.server_name, "', expected '",
                                                    o.peer_name, "'"));
  }
  std::string expected = ComputeProof(o.secret, AuthRole::kServer, hello.client_nonce,
                                      challenge.server_nonce, o.local_name, o.peer_name);
  if (!ProofEquals(expected, challenge.server_proof)) {
    return absl::PermissionDeniedError(
        absl::StrCat("peer '", o.peer_name, "' failed authentication: cluster secret mismatch"));
  }
  h = FrameHeader{};
  h.type = FrameType::kAuth;
  SendFrame(lane.socket, h,
            ComputeProof(o.secret, AuthRole::kClient, hello.client_nonce, challenge.server_nonce,
                         o.local_name, o.peer_name));
  ASSIGN_OR_RETURN(reply, RecvFrame(lane.socket, deadline, what));
  RETURN_IF_ERROR(CheckNotRejected(reply.first, reply.second, o));
  if (reply.first.type != FrameType::kWelcome || reply.first.session == 0) {
    return absl::DataLossError(absl::StrCat("peer '", o.peer_name, "' answered auth with ",
                                            FrameTypeName(reply.first.type)));
  }
  lane.session = reply.first.session;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ControlCall(ClientLane& lane, const std::string& body,
                                        absl::Time deadline) {
  FrameHeader h;
  h.type = FrameType::kControl;
  h.session = lane.session;
  try {
    SendFrame(lane.socket, h, body);
    ASSIGN_OR_RETURN(auto reply, RecvFrame(lane.socket, deadline, "a control reply"));
    if (reply.first.type == FrameType::kNack) {
      auto code = static_cast<absl::StatusCode>(reply.first.code);
      if (code == absl::StatusCode::kOk || reply.first.code > 16)
        code = absl::StatusCode::kInternal;
      return absl::Status(code, reply.second.substr(0, kMaxReasonBytes));
    }
    if (reply.first.type != FrameType::kControlReply) {
      return absl::DataLossError(
          absl::StrCat("expected a control reply, got ", FrameTypeName(reply.first.type)));
    }
    return reply.second;
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("control call failed: ", e.what()));
  }
}

void CloseLane(ClientLane& lane) {
  if (lane.socket) {
    // Stop the monitor before either socket goes: libzmq sends monitor events with a blocking
    // send, so a DISCONNECTED or CLOSED event emitted after our end of the monitor pair is closed
    // would block the context's I/O thread for good, and with it every later connection of this
    // engine (seen as handshakes that time out after a partition).
    (void)zmq_socket_monitor(lane.socket.handle(), nullptr, 0);
    lane.socket.set(zmq::sockopt::linger, 0);
    lane.socket.close();
  }
  if (lane.monitor) lane.monitor.close();
}

absl::StatusOr<std::vector<ClientLane>> ConnectLanes(zmq::context_t& ctx, const ClientOptions& o,
                                                     int lanes, absl::Time deadline) {
  std::vector<ClientLane> out(lanes);
  auto fail = [&](absl::Status s) {
    for (ClientLane& l : out) CloseLane(l);
    return s;
  };
  try {
    for (int i = 0; i < lanes; ++i) {
      ClientLane& l = out[i];
      l.socket = zmq::socket_t(ctx, zmq::socket_type::dealer);
      l.socket.set(zmq::sockopt::linger, 0);
      l.socket.set(zmq::sockopt::reconnect_ivl, -1);
      l.socket.set(zmq::sockopt::heartbeat_ivl, o.heartbeat_ms);
      l.socket.set(zmq::sockopt::heartbeat_timeout, 3 * o.heartbeat_ms);
      l.socket.set(zmq::sockopt::heartbeat_ttl, 3 * o.heartbeat_ms);
      l.socket.set(zmq::sockopt::sndhwm, 256);
      l.socket.set(zmq::sockopt::sndbuf, 4 << 20);
      l.socket.set(zmq::sockopt::rcvbuf, 4 << 20);
      l.socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(1 << 20));
      std::string monitor = absl::StrCat(o.monitor_prefix, "-", i);
      if (zmq_socket_monitor(l.socket.handle(), monitor.c_str(),
                             ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CLOSED) != 0) {
        return fail(absl::InternalError(absl::StrCat("zmq_socket_monitor: ", zmq_strerror(errno))));
      }
      l.monitor = zmq::socket_t(ctx, zmq::socket_type::pair);
      l.monitor.connect(monitor);
      l.socket.connect(o.endpoint);
    }
    for (ClientLane& l : out) {
      absl::Status s = Handshake(l, o, deadline);
      if (!s.ok()) return fail(s);
    }
  } catch (const zmq::error_t& e) {
    return fail(absl::UnavailableError(
        absl::StrCat("tcp: cannot connect to ", o.endpoint, ": ", e.what())));
  }
  return out;
}

}  // namespace tandem::kv
