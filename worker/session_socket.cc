#include "worker/session_socket.h"

#include <openssl/rand.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/frames.h"
#include "common/log_every.h"
#include "spdlog/spdlog.h"
#include "worker/session_preauth.h"

namespace tandem::worker {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

constexpr size_t kReadChunk = 64 << 10;

std::string NewChallenge() {
  unsigned char nonce[16];
  if (RAND_bytes(nonce, sizeof nonce) != 1) {
    // Without a fresh nonce a recorded token could be replayed: refuse rather than reuse one.
    return "";
  }
  return absl::StrCat(kSessionSocketProtocol, " ",
                      absl::BytesToHexString(
                          absl::string_view(reinterpret_cast<const char*>(nonce), sizeof nonce)));
}

}  // namespace

struct LinkSocketServer::Impl {
  asio::io_context io;
  std::optional<tcp::acceptor> acceptor;
  std::thread thread;
  LegHandler* legs = nullptr;
  std::string secret;
  std::string audience;  // the worker's instance id, named by every token
  int port = 0;
  LinkServer links;
  LogEvery refusal_logs{absl::Seconds(1)};
  PreAuthAdmission preauth;  // I/O thread: connections that have not authenticated yet
  std::atomic<int> accepted{0};
  std::mutex mu;
  std::condition_variable cv;
  int connections = 0;                   // guarded by mu: transports not yet released
  bool closed = false;                   // guarded by mu
  std::unordered_set<RouterLink*> live;  // I/O thread: connections not yet released

  void Accept();
  void Released() {
    std::lock_guard<std::mutex> lock(mu);
    --connections;
    cv.notify_all();
  }
  // At most one line a second, with how many were left out: a stranger hammering the port must
  // not fill the disk.
  void LogRefusal(const std::string& peer, const std::string& why) {
    int64_t more = 0;
    if (refusal_logs.Allow(&more)) {
      spdlog::warn("session socket from {} refused: {} ({} more refused since the last line)", peer,
                   why, more);
    }
  }
};

namespace {

// One connection. The transport's reference (RouterLink's first) is let go on the I/O thread
// once the read loop has ended and Close has run; the socket goes with it, so a core that live
// legs keep alive longer holds no I/O object.
class SocketLink : public RouterLink {
 public:
  // `address`: the peer's, as admitted to server->preauth (the link leaves it).
  SocketLink(LinkSocketServer::Impl* server, tcp::socket socket, std::string address,
             std::string peer)
      : RouterLink(&server->links, server->legs),
        server_(server),
        socket_(std::move(socket)),
        timer_(std::in_place, server->io),
        address_(std::move(address)),
        peer_(std::move(peer)),
        reader_(kMaxPreAuthFrameBytes) {
    SetUpClusterSocket(socket_->native_handle());
  }

  // I/O thread: sends the challenge and starts reading.
  void Start() {
    challenge_ = NewChallenge();
    if (challenge_.empty()) {
      Refuse(absl::InternalError("the worker could not draw a random challenge"));
      Read();
      return;
    }
    proto::SessionDown hello;
    hello.set_challenge(challenge_);
    std::string frame;
    AppendFrame(&frame, hello.SerializeAsString());
    boost::system::error_code ec;
    asio::write(*socket_, asio::buffer(frame), ec);  // a few dozen bytes: the socket takes them
    timer_->expires_after(absl::ToChronoSeconds(kPreAuthTimeout));
    timer_->async_wait([this](const boost::system::error_code& ec) {
      if (ec || authed_) return;
      Refuse(absl::DeadlineExceededError(absl::StrCat("no first message within ",
                                                      absl::ToInt64Seconds(kPreAuthTimeout),
                                                      " s of the challenge")));
    });
    Read();
  }

  // I/O thread: the server is going away; whatever is in flight on the socket ends with an
  // error, which leads to Close and the release.
  void ForceClose() {
    if (!socket_) return;
    boost::system::error_code ec;
    socket_->shutdown(tcp::socket::shutdown_both, ec);
    socket_->cancel(ec);
  }

 protected:
  // Any thread; one at a time (RouterLink has at most one batch in flight).
  void WriteBatch(const proto::SessionDown* batch) override {
    send_.Run(
        fd_, batch, [this] { Written(true); },
        [this](size_t done) {  // the rest when the socket has room, on the I/O thread
          asio::post(server_->io, [this, done] {
            if (!socket_) {
              Written(false);
              return;
            }
            const std::string& bytes = send_.bytes();
            asio::async_write(
                *socket_, asio::buffer(bytes.data() + done, bytes.size() - done),
                [this](const boost::system::error_code& ec, size_t) { Written(!ec); });
          });
        },
        [this](const absl::Status& /*error*/) { Written(false); });
  }

  // Any thread, once, with no write in flight.
  void Close(const absl::Status& status) override {
    asio::post(server_->io, [this, status] {
      if (socket_ && !status.ok() && status.code() != absl::StatusCode::kCancelled) {
        proto::SessionDown bye;
        bye.mutable_ended()->set_code(static_cast<int>(status.code()));
        bye.mutable_ended()->set_message(std::string(status.message()));
        std::string frame;
        AppendFrame(&frame, bye.SerializeAsString());
        // Best effort, without blocking: a router that stopped reading gets the close alone.
        (void)::send(fd_, frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      }
      closed_ = true;
      if (socket_) {
        boost::system::error_code ec;
        socket_->shutdown(tcp::socket::shutdown_both, ec);
        socket_->cancel(ec);  // the read in flight ends; the descriptor closes at the release
      }
      MaybeRelease();
    });
  }

 private:
  // I/O thread.
  void Read() {
    if (!socket_ || closed_) {
      read_done_ = true;
      MaybeRelease();
      return;
    }
    socket_->async_read_some(
        asio::buffer(reader_.Prepare(kReadChunk), kReadChunk),
        [this](const boost::system::error_code& ec, size_t n) {
          if (ec) {  // the router closed its end, the connection broke, or Close ran
            End(absl::OkStatus());
            read_done_ = true;
            MaybeRelease();
            return;
          }
          reader_.Commit(n);
          if (!OnBytes()) {
            read_done_ = true;
            MaybeRelease();
            return;
          }
          Read();
        });
  }

  // I/O thread: handles every complete message buffered; false once the link has ended.
  bool OnBytes() {
    while (true) {
      absl::StatusOr<std::optional<std::string_view>> frame = reader_.Next();
      if (!frame.ok()) {
        Refuse(absl::InvalidArgumentError(absl::StrCat(
            "the session socket is not a session stream: ", frame.status().message())));
        return false;
      }
      if (!frame->has_value()) return true;
      if (!authed_) {
        const absl::Status first = OpenFirstSessionMessage(
            server_->secret, challenge_, server_->audience, **frame, absl::Now(), &up_);
        if (!first.ok()) {
          Refuse(first);
          return false;
        }
        authed_ = true;
        timer_->cancel();
        LeavePreAuth();
        // Only now may the router's batches be large: a stranger never gets past the small limit.
        reader_.set_max_frame(kMaxSessionFrameBytes);
      } else {
        up_.Clear();
        if (!up_.ParseFromArray((*frame)->data(), static_cast<int>((*frame)->size()))) {
          Refuse(absl::InvalidArgumentError(absl::StrCat(
              "a ", (*frame)->size(), "-byte message on the session socket is not a SessionUp")));
          return false;
        }
      }
      Handle(up_);
      if (ended()) return false;
    }
  }

  // I/O thread: ends the link with `status` (not OK), which the router is told before the close.
  void Refuse(const absl::Status& status) {
    server_->LogRefusal(peer_, std::string(status.message()));
    End(status);
  }

  // I/O thread: the connection no longer counts against the caps on unauthenticated ones.
  void LeavePreAuth() {
    if (left_preauth_) return;
    left_preauth_ = true;
    server_->preauth.Leave(address_);
  }

  // I/O thread: lets the transport's reference go once reading and Close are both over.
  void MaybeRelease() {
    if (!read_done_ || !closed_ || released_) return;
    released_ = true;
    LeavePreAuth();
    timer_.reset();
    socket_.reset();
    LinkSocketServer::Impl* server = server_;
    server->live.erase(this);
    Forget();
    Unref();  // may delete this
    server->Released();
  }

  LinkSocketServer::Impl* const server_;
  std::optional<tcp::socket> socket_;  // I/O thread; reset at release
  const int fd_ = socket_->native_handle();
  std::optional<asio::steady_timer> timer_;  // the first message's deadline; reset at release
  const std::string address_;                // the peer's address, as server_->preauth counts it
  const std::string peer_;                   // address:port, for logs
  std::string challenge_;
  FrameReader reader_;         // I/O thread
  proto::SessionUp up_;        // I/O thread
  bool authed_ = false;        // I/O thread
  bool read_done_ = false;     // I/O thread
  bool closed_ = false;        // I/O thread
  bool released_ = false;      // I/O thread
  bool left_preauth_ = false;  // I/O thread: authenticated or released, no longer counted
  FrameSendLoop send_;         // the write path: one thread at a time, handed on through the core
};

}  // namespace

void LinkSocketServer::Impl::Accept() {
  acceptor->async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
    if (!ec) {
      accepted.fetch_add(1);
      boost::system::error_code endpoint_ec;
      const tcp::endpoint remote = socket.remote_endpoint(endpoint_ec);
      const std::string address =
          endpoint_ec ? std::string("unknown") : remote.address().to_string();
      const std::string peer =
          endpoint_ec ? std::string("an unknown peer") : absl::StrCat(address, ":", remote.port());
      if (!preauth.TryAdmit(address)) {
        // Closed before the challenge: a stranger opening connections by the thousand holds
        // none of the worker's memory beyond the caps' worth.
        LogRefusal(peer, absl::StrCat("too many connections that have not authenticated (at most ",
                                      kMaxPreAuthConnections, ", ",
                                      kMaxPreAuthConnectionsPerAddress, " per address)"));
        boost::system::error_code close_ec;
        socket.close(close_ec);
        Accept();
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        ++connections;
      }
      auto* link = new SocketLink(this, std::move(socket), address, peer);
      live.insert(link);
      links.Add(link);
      link->Start();
    }
    Accept();
  });
}

absl::StatusOr<std::unique_ptr<LinkSocketServer>> LinkSocketServer::Start(
    const std::string& host, int port, LegHandler* legs, std::string cluster_secret,
    std::string audience, const std::string& port_flag) {
  auto impl = std::make_unique<Impl>();
  impl->legs = legs;
  impl->secret = std::move(cluster_secret);
  impl->audience = std::move(audience);
  boost::system::error_code ec;
  tcp::resolver resolver(impl->io);
  const auto found = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || found.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(port_flag, "cannot listen for sessions on '",
                                                   host, "': ", ec ? ec.message() : "no address"));
  }
  const tcp::endpoint endpoint = found.begin()->endpoint();
  tcp::acceptor acceptor(impl->io);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat(port_flag, "cannot listen for sessions on ", host,
                                               ":", port, ": ", ec.message()));
  }
  impl->port = acceptor.local_endpoint().port();
  impl->acceptor.emplace(std::move(acceptor));
  impl->Accept();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] {
    auto guard = asio::make_work_guard(raw->io);
    raw->io.run();
  });
  return std::unique_ptr<LinkSocketServer>(new LinkSocketServer(std::move(impl)));
}

LinkSocketServer::LinkSocketServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

LinkSocketServer::~LinkSocketServer() {
  CloseAll();
  // Links whose Close waits for a write the router does not read: cut them.
  Impl* impl = impl_.get();
  asio::post(impl->io, [impl] {
    for (RouterLink* link : impl->live) static_cast<SocketLink*>(link)->ForceClose();
  });
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    impl_->cv.wait_for(lock, std::chrono::seconds(5), [&] { return impl_->connections == 0; });
  }
  impl_->io.stop();
  impl_->thread.join();
}

int LinkSocketServer::port() const { return impl_->port; }

int LinkSocketServer::accepted() const { return impl_->accepted.load(); }

void LinkSocketServer::CloseAll() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->closed) return;
    impl_->closed = true;
  }
  Impl* impl = impl_.get();
  asio::post(impl->io, [impl] {
    boost::system::error_code ec;
    impl->acceptor->close(ec);
  });
  impl->links.CloseAll();
}

}  // namespace tandem::worker
