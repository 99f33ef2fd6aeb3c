// The router's end of the session socket (proto/worker.proto): see OpenSocketLink.
#include <utility>
// <utility> first: Boost.Asio's awaitable.hpp uses std::exchange without including it.
#include <boost/asio.hpp>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cluster_token.h"
#include "common/frames.h"
#include "router/workers/worker_session.h"

namespace tandem::router {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

constexpr auto kConnectTimeout = std::chrono::seconds(5);
constexpr size_t kReadChunk = 64 << 10;

// The process's session-socket I/O thread. Never destroyed, as LegTimers: no exit-time
// destructor may race a connection still completing.
asio::io_context& SessionIo() {
  static asio::io_context* io = [] {
    auto* context = new asio::io_context(1);
    std::thread([context] {
      auto guard = asio::make_work_guard(*context);
      context->run();
    }).detach();
    return context;
  }();
  return *io;
}

absl::Status Unavailable(std::string message) { return absl::UnavailableError(message); }

class SocketWorkerLink : public WorkerLink {
 public:
  SocketWorkerLink(std::string host, int port, std::string url, std::string secret,
                   std::string audience, std::function<void(const absl::Status&)> on_connect_failed)
      : WorkerLink(std::move(url), /*hold_writes=*/true),
        host_(std::move(host)),
        port_(port),
        secret_(std::move(secret)),
        audience_(std::move(audience)),
        on_connect_failed_(std::move(on_connect_failed)),
        resolver_(SessionIo()),
        socket_(SessionIo()),
        timer_(SessionIo()),
        reader_(kMaxSessionFrameBytes) {}

  // I/O thread.
  void Start() {
    auto self = Self();
    timer_.expires_after(kConnectTimeout);
    timer_.async_wait([self](const boost::system::error_code& ec) {
      if (ec || self->connected_) return;
      self->ConnectFailed("no connection within 5 s");
    });
    resolver_.async_resolve(
        host_, std::to_string(port_),
        [self](const boost::system::error_code& ec, tcp::resolver::results_type found) {
          if (self->ended_) return;
          if (ec) {
            self->ConnectFailed(ec.message());
            return;
          }
          asio::async_connect(self->socket_, found,
                              [self](const boost::system::error_code& ec, const tcp::endpoint&) {
                                if (self->ended_) return;
                                if (ec) {
                                  self->ConnectFailed(ec.message());
                                  return;
                                }
                                self->Connected();
                              });
        });
  }

 protected:
  // Any thread, one at a time (the base has at most one batch in flight).
  void WriteBatch(const proto::SessionUp* batch) override {
    send_.Run(
        fd_, batch, [this] { WriteDone(true); },
        [this](size_t done) {  // the rest when the socket has room, on the I/O thread
          auto self = Self();
          asio::post(SessionIo(), [self, done] {
            const std::string& bytes = self->send_.bytes();
            asio::async_write(self->socket_, asio::buffer(bytes.data() + done, bytes.size() - done),
                              [self](const boost::system::error_code& ec, size_t) {
                                self->WriteDone(!ec);
                                if (ec) self->WriteFailed(ec.message());
                              });
          });
        },
        [this](const absl::Status& error) {
          WriteDone(false);
          WriteFailed(std::string(error.message()));
        });
  }

  // Any thread: a write failed; the calls fail naming why.
  void WriteFailed(const std::string& why) {
    auto self = Self();
    asio::post(SessionIo(), [self, why] {
      self->End(
          Unavailable(absl::StrCat("the session socket to worker ", self->url_, " broke: ", why)));
    });
  }

  // Any thread.
  void CloseTransport() override {
    auto self = Self();
    asio::post(SessionIo(), [self] { self->End(absl::OkStatus()); });
  }

 private:
  std::shared_ptr<SocketWorkerLink> Self() {
    return std::static_pointer_cast<SocketWorkerLink>(shared_from_this());
  }

  // I/O thread.
  void Connected() {
    connected_ = true;
    timer_.cancel();
    const int fd = socket_.native_handle();
    SetUpClusterSocket(fd);
    fd_ = fd;
    Read();
  }

  // I/O thread: the connection could not be made. The calls fail; the client hears why.
  void ConnectFailed(const std::string& why) {
    if (ended_) return;
    const absl::Status status = Unavailable(absl::StrCat(
        "cannot reach worker ", url_, "'s session socket at ", host_, ":", port_, ": ", why));
    // The client falls back first, so that a leg retried from a failed one's callback already
    // goes over gRPC.
    if (on_connect_failed_) on_connect_failed_(status);
    End(status);
  }

  // I/O thread.
  void Read() {
    auto self = Self();
    socket_.async_read_some(
        asio::buffer(reader_.Prepare(kReadChunk), kReadChunk),
        [self](const boost::system::error_code& ec, size_t n) {
          if (self->ended_) return;
          if (ec) {
            self->End(ec == asio::error::eof
                          ? absl::OkStatus()
                          : Unavailable(absl::StrCat("the session socket to worker ", self->url_,
                                                     " broke: ", ec.message())));
            return;
          }
          self->reader_.Commit(n);
          if (self->OnBytes()) self->Read();
        });
  }

  // I/O thread: handles every complete message buffered; false once the session has ended.
  bool OnBytes() {
    while (true) {
      absl::StatusOr<std::optional<std::string_view>> frame = reader_.Next();
      if (!frame.ok()) {
        End(Protocol(std::string(frame.status().message())));
        return false;
      }
      if (!frame->has_value()) return true;
      down_.Clear();
      if (!down_.ParseFromArray((*frame)->data(), static_cast<int>((*frame)->size()))) {
        End(Protocol(absl::StrCat("a ", (*frame)->size(), "-byte message is not a SessionDown")));
        return false;
      }
      if (!greeted_) {
        if (!absl::StartsWith(down_.challenge(), absl::StrCat(kSessionSocketProtocol, " "))) {
          End(Protocol(
              absl::StrCat("its first message is not a ", kSessionSocketProtocol, " challenge")));
          return false;
        }
        greeted_ = true;
        proto::SessionUp hello;
        // No token for a worker that has not proven the secret (no audience): the worker
        // refuses the session, and a stranger learns nothing it could replay.
        if (!secret_.empty() && !audience_.empty()) {
          hello.set_auth(MakeClusterToken(secret_, down_.challenge(), audience_, absl::Now()));
        }
        std::string frame_bytes;
        AppendFrame(&frame_bytes, hello.SerializeAsString());
        boost::system::error_code ec;
        asio::write(socket_, asio::buffer(frame_bytes), ec);  // a few dozen bytes
        if (ec) {
          End(Unavailable(
              absl::StrCat("the session socket to worker ", url_, " broke: ", ec.message())));
          return false;
        }
        ReleaseWrites();
        continue;
      }
      if (down_.has_ended()) {
        const proto::CallError& e = down_.ended();
        End(LegStatusFromWire(e.code(),
                              absl::StrCat("worker ", url_, " ended the session: ", e.message()),
                              absl::StatusCode::kUnavailable));
        return false;
      }
      OnReplies(down_);
    }
  }

  absl::Status Protocol(const std::string& why) {
    return absl::InternalError(absl::StrCat(
        "worker ", url_, " does not speak the session protocol on ", host_, ":", port_, ": ", why));
  }

  // I/O thread, once: no more writes or reads; the live calls fail with `status`. The socket is
  // shut down, not closed: a write still running on another thread then fails rather than
  // reach whatever connection might reuse a closed descriptor. It closes with the session.
  void End(const absl::Status& status) {
    if (ended_) return;
    ended_ = true;
    Broken();
    boost::system::error_code ec;
    timer_.cancel();
    resolver_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.cancel(ec);
    FailAll(status);
  }

  const std::string host_;
  const int port_;
  const std::string secret_;
  const std::string audience_;  // the worker's instance id, from its proof
  const std::function<void(const absl::Status&)> on_connect_failed_;
  // I/O thread:
  tcp::resolver resolver_;
  tcp::socket socket_;
  asio::steady_timer timer_;  // the connection's deadline
  FrameReader reader_;
  proto::SessionDown down_;
  bool connected_ = false;
  bool greeted_ = false;
  bool ended_ = false;
  // The write path (one thread at a time, handed on through the base's lock). fd_ is set before
  // the first write (ReleaseWrites, after the handshake) and the socket is closed only on the
  // I/O thread after Broken(), which stops writes.
  int fd_ = -1;
  FrameSendLoop send_;
};

}  // namespace

std::shared_ptr<WorkerLink> OpenSocketLink(
    const std::string& host, int port, const std::string& url, const std::string& cluster_secret,
    const std::string& audience, std::function<void(const absl::Status&)> on_connect_failed) {
  auto session = std::make_shared<SocketWorkerLink>(host, port, url, cluster_secret, audience,
                                                    std::move(on_connect_failed));
  asio::post(SessionIo(), [session] { session->Start(); });
  return session;
}

}  // namespace tandem::router
