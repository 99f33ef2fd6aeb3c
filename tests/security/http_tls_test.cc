// HttpServer over TLS (HttpServerOptions::tls_*): a verified HTTPS round trip (whole and
// streamed responses, keep-alive), clear start-up errors for bad certificate/key files, and
// clients that do not speak TLS (plain HTTP, silence) being closed while the server keeps
// serving. The certificate is made at test time.
#include "common/http_tls.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "common/http_server.h"
#include "gtest/gtest.h"
#include "tests/security/tls_test_util.h"

namespace tandem {
namespace {

using sectest::TlsRequest;

struct RawOutcome {
  bool closed = false;   // the server closed (EOF or reset) within 60 s
  std::string received;  // what it sent before
};

// Connects over plain TCP, sends `data` and reads until the server closes the connection.
RawOutcome SendRawAndWaitForClose(uint16_t port, const std::string& data) {
  RawOutcome out;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{60, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    ADD_FAILURE() << "cannot connect";
    return out;
  }
  if (!data.empty()) {
    EXPECT_EQ(::send(fd, data.data(), data.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(data.size()));
  }
  for (;;) {
    char buffer[4096];
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n > 0) {
      out.received.append(buffer, static_cast<size_t>(n));
      continue;
    }
    out.closed = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    break;
  }
  ::close(fd);
  return out;
}

class HttpTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cert_ = sectest::MakeSelfSignedCertificate(::testing::TempDir(), "http_tls_test");
  }

  std::unique_ptr<HttpServer> StartServer() {
    HttpServerOptions options;
    options.host = "127.0.0.1";
    options.threads = 2;
    options.tls_cert_file = cert_.cert_file;
    options.tls_key_file = cert_.key_file;
    options.read_timeout = std::chrono::milliseconds(1000);
    auto server = std::make_unique<HttpServer>(options);
    server->Handle("POST", "/echo", [](HttpRequest request, HttpResponder responder) {
      responder.Send(HttpResponse{200, "text/plain", {}, "echo:" + request.body});
    });
    server->Handle("GET", "/stream", [](HttpRequest, HttpResponder responder) {
      HttpStreamPtr stream = responder.StartStream(200, "text/event-stream");
      std::thread([stream] {
        for (int i = 0; i < 3; ++i) stream->Write("data: " + std::to_string(i) + "\n\n");
        stream->Finish();
      }).detach();
    });
    EXPECT_TRUE(server->Start().ok());
    return server;
  }

  sectest::TestCertificate cert_;
};

TEST_F(HttpTlsTest, VerifiedRoundTripWholeAndStreamed) {
  auto server = StartServer();
  sectest::TlsReply r = TlsRequest(server->port(), cert_.cert_file, "POST", "/echo", "hello");
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(r.body, "echo:hello");
  r = TlsRequest(server->port(), cert_.cert_file, "GET", "/stream");
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(r.body, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  r = TlsRequest(server->port(), cert_.cert_file, "GET", "/nowhere");
  EXPECT_EQ(r.status, 404) << r.error;
}

TEST_F(HttpTlsTest, ClientThatDoesNotTrustTheCertificateFails) {
  auto server = StartServer();
  auto other = sectest::MakeSelfSignedCertificate(::testing::TempDir(), "http_tls_other");
  sectest::TlsReply r = TlsRequest(server->port(), other.cert_file, "POST", "/echo", "x");
  EXPECT_EQ(r.status, 0);
  EXPECT_FALSE(r.error.empty());
}

TEST_F(HttpTlsTest, PlainHttpAndSilentClientsAreClosedAndServingGoesOn) {
  auto server = StartServer();
  // Plain HTTP to the TLS port: the handshake fails and the connection is closed, with no HTTP
  // answer.
  RawOutcome plain = SendRawAndWaitForClose(
      server->port(), "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx");
  EXPECT_TRUE(plain.closed) << "the server kept a plain HTTP client's connection open";
  EXPECT_EQ(plain.received.rfind("HTTP/", 0), std::string::npos) << plain.received;
  // A client that connects and says nothing is closed after read_timeout, not held forever.
  RawOutcome silent = SendRawAndWaitForClose(server->port(), "");
  EXPECT_TRUE(silent.closed) << "the server kept a silent client's connection open";
  EXPECT_TRUE(silent.received.empty());
  sectest::TlsReply r = TlsRequest(server->port(), cert_.cert_file, "POST", "/echo", "still");
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(r.body, "echo:still");
}

TEST_F(HttpTlsTest, BadFilesFailAtStartNamingTheFile) {
  const std::string dir = ::testing::TempDir();
  const std::string garbage = dir + "/http_tls_garbage.pem";
  std::ofstream(garbage) << "-----BEGIN CERTIFICATE-----\nnot base64\n";
  auto other = sectest::MakeSelfSignedCertificate(dir, "http_tls_mismatch");
  struct Case {
    std::string cert, key, expect;
  } cases[] = {
      {dir + "/missing.crt", cert_.key_file, "missing.crt"},
      {cert_.cert_file, dir + "/missing.key", "missing.key"},
      {garbage, cert_.key_file, garbage},
      {cert_.cert_file, garbage, garbage},
      {cert_.cert_file, other.key_file, "does not match"},
  };
  for (const Case& c : cases) {
    const absl::Status check = CheckTlsFiles(c.cert, c.key);
    EXPECT_EQ(check.code(), absl::StatusCode::kInvalidArgument) << check;
    EXPECT_NE(check.message().find(c.expect), std::string::npos) << check;
    HttpServerOptions options;
    options.host = "127.0.0.1";
    options.tls_cert_file = c.cert;
    options.tls_key_file = c.key;
    HttpServer server(options);
    const absl::Status start = server.Start();
    EXPECT_FALSE(start.ok());
    EXPECT_NE(start.message().find(c.expect), std::string::npos) << start;
  }
  EXPECT_TRUE(CheckTlsFiles(cert_.cert_file, cert_.key_file).ok());
}

}  // namespace
}  // namespace tandem
