#include "bench/router_bench/load.h"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "grpcpp/grpcpp.h"
#include "proto/worker.grpc.pb.h"

namespace tandem::bench {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Clock = std::chrono::steady_clock;

// What every load thread shares: the request budget, latencies, the first error.
struct Shared {
  std::atomic<int64_t> next{0};
  int64_t total = 0;
  std::mutex mu;
  std::vector<double> latencies;
  int64_t errors = 0;
  std::string first_error;
  std::string last_body;

  bool Take() { return next.fetch_add(1) < total; }
  void Merge(std::vector<double>& lat, int64_t errs, const std::string& err) {
    std::lock_guard<std::mutex> lock(mu);
    latencies.insert(latencies.end(), lat.begin(), lat.end());
    errors += errs;
    if (first_error.empty()) first_error = err;
  }
};

// Fires `on_deadline` once when `timeout` passes, unless Stop() came first.
class Watchdog {
 public:
  Watchdog(std::chrono::seconds timeout, std::function<void()> on_deadline)
      : thread_([this, timeout, f = std::move(on_deadline)] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, timeout, [this] { return stopped_; })) f();
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::thread thread_;
};

LoadResult Summarize(Shared& s, double wall_s) {
  LoadResult r;
  r.ok = static_cast<int64_t>(s.latencies.size());
  r.errors = s.errors;
  r.first_error = s.first_error;
  r.last_body = std::move(s.last_body);
  r.wall_s = wall_s;
  r.rps = wall_s > 0 ? static_cast<double>(r.ok) / wall_s : 0;
  std::vector<double>& v = s.latencies;
  if (!v.empty()) {
    std::sort(v.begin(), v.end());
    auto at = [&v](double q) {
      return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
    };
    r.p50_s = at(0.50);
    r.p99_s = at(0.99);
    r.mean_s = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  }
  return r;
}

void HttpThread(const LoadSpec& spec, int port, Shared* shared, std::atomic<int>* fd_slot,
                std::atomic<bool>* expired) {
  asio::io_context io;
  std::vector<double> lat;
  int64_t errors = 0;
  std::string err;
  std::string last;
  std::unique_ptr<asio::ip::tcp::socket> sock;
  beast::flat_buffer buffer;
  http::request<http::string_body> req{http::verb::post, "/generate", 11};
  req.set(http::field::host, absl::StrCat("127.0.0.1:", port));
  req.set(http::field::content_type, "application/json");
  req.keep_alive(true);
  req.body() = spec.body;
  req.prepare_payload();
  const asio::ip::tcp::endpoint ep(asio::ip::make_address("127.0.0.1"),
                                   static_cast<uint16_t>(port));
  auto fail = [&](const std::string& what) {
    ++errors;
    if (err.empty()) err = what;
    if (sock) fd_slot->store(-1);
    sock.reset();
  };
  while (!expired->load() && shared->Take()) {
    const Clock::time_point start = Clock::now();
    beast::error_code ec;
    if (!sock) {
      sock = std::make_unique<asio::ip::tcp::socket>(io);
      sock->connect(ep, ec);
      if (ec) {
        fail(absl::StrCat("connect 127.0.0.1:", port, ": ", ec.message()));
        continue;
      }
      sock->set_option(asio::ip::tcp::no_delay(true));
      fd_slot->store(sock->native_handle());
      buffer.clear();
    }
    http::write(*sock, req, ec);
    http::response<http::string_body> res;
    if (!ec) http::read(*sock, buffer, res, ec);
    if (ec) {
      fail(absl::StrCat("127.0.0.1:", port, ": ", ec.message()));
      continue;
    }
    if (res.result_int() != 200) {
      fail(absl::StrCat("127.0.0.1:", port, " answered ", res.result_int(), ": ",
                        res.body().substr(0, 300)));
      continue;
    }
    lat.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    if (spec.keep_last_body) last = res.body();
    if (!res.keep_alive()) {
      fd_slot->store(-1);
      sock.reset();
    }
  }
  if (expired->load() && err.empty() && shared->next.load() < shared->total) {
    err = "phase timed out";
  }
  fd_slot->store(-1);
  shared->Merge(lat, errors, err);
  if (spec.keep_last_body) {
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->last_body = last;
  }
}

}  // namespace

LoadResult RunHttpLoad(const LoadSpec& spec) {
  Shared shared;
  shared.total = spec.requests;
  const int n = std::max(1, std::min(spec.concurrency, spec.requests));
  std::vector<std::atomic<int>> fds(static_cast<size_t>(n));
  for (auto& f : fds) f.store(-1);
  std::atomic<bool> expired{false};
  const Clock::time_point start = Clock::now();
  {
    Watchdog dog(spec.timeout, [&] {
      expired.store(true);
      for (auto& f : fds) {
        const int fd = f.load();
        if (fd >= 0) ::shutdown(fd, SHUT_RDWR);  // unblocks a read stuck on a silent peer
      }
    });
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      const int port = spec.ports[static_cast<size_t>(i) % spec.ports.size()];
      threads.emplace_back(HttpThread, std::cref(spec), port, &shared, &fds[i], &expired);
    }
    for (auto& t : threads) t.join();
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  const int64_t unsent = std::max<int64_t>(0, shared.total - shared.next.load());
  shared.errors += std::min(unsent, shared.total);
  return Summarize(shared, wall);
}

LoadResult RunGrpcDecodeLoad(const GrpcLoadSpec& spec) {
  Shared shared;
  shared.total = spec.requests;
  const int n = std::max(1, std::min(spec.concurrency, spec.requests));
  const Clock::time_point start = Clock::now();
  const auto deadline = std::chrono::system_clock::now() + spec.timeout;
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    const int port = spec.ports[static_cast<size_t>(i) % spec.ports.size()];
    threads.emplace_back([&spec, &shared, port, deadline, i] {
      // A channel of its own per connection (distinct args: gRPC would share a subchannel).
      grpc::ChannelArguments args;
      args.SetInt("tandem.bench.connection", i);
      auto stub = proto::Worker::NewStub(grpc::CreateCustomChannel(
          absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(), args));
      proto::DecodeRequest req;
      for (int t = 0; t < spec.prompt_len; ++t) req.add_input_ids(100 + (t * 37) % 2900);
      req.mutable_sampling_params()->set_max_new_tokens(spec.tokens);
      req.mutable_sampling_params()->set_temperature(0);
      std::vector<double> lat;
      int64_t errors = 0;
      std::string err;
      while (shared.Take()) {
        const Clock::time_point t0 = Clock::now();
        grpc::ClientContext ctx;
        ctx.set_deadline(deadline);
        req.set_rid(absl::StrCat("bench-", i, "-", lat.size()));
        auto reader = stub->Decode(&ctx, req);
        proto::DecodeEvent ev;
        bool finished = false;
        while (reader->Read(&ev)) finished = finished || ev.finished();
        const grpc::Status st = reader->Finish();
        if (!st.ok() || !finished) {
          ++errors;
          if (err.empty()) {
            err = absl::StrCat("Decode on 127.0.0.1:", port, ": ",
                               st.ok() ? "no finished event" : st.error_message());
          }
          if (std::chrono::system_clock::now() > deadline) break;
          continue;
        }
        lat.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      shared.Merge(lat, errors, err);
    });
  }
  for (auto& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  const int64_t unsent = std::max<int64_t>(0, shared.total - shared.next.load());
  shared.errors += unsent;
  return Summarize(shared, wall);
}

}  // namespace tandem::bench
