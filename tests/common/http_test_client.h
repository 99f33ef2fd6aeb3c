// A minimal blocking HTTP/1.1 client over a plain socket, for the HttpServer tests: it sends raw
// bytes (so tests can send malformed requests) and reads responses with Content-Length, chunked
// or read-until-close bodies, chunk by chunk when asked.
#ifndef TANDEM_TESTS_COMMON_HTTP_TEST_CLIENT_H_
#define TANDEM_TESTS_COMMON_HTTP_TEST_CLIENT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tandem::testing {

struct ClientResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::vector<std::string> chunks;  // when chunked
};

class TestClient {
 public:
  // Connects to 127.0.0.1:port; every read gives up after `timeout_seconds`.
  explicit TestClient(uint16_t port, int timeout_seconds = 10) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{timeout_seconds, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~TestClient() { Close(); }
  TestClient(const TestClient&) = delete;
  TestClient& operator=(const TestClient&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }  // for poll(); still owned by this client
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Shrinks the receive buffer (call before sending) so a slow reader fills up quickly.
  void SetReceiveBuffer(int bytes) {
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  }

  bool Send(const std::string& data) {
    size_t sent = 0;
    while (sent < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  // "GET /path HTTP/1.1" with Host and optional body (Content-Length).
  bool SendRequest(const std::string& method, const std::string& target,
                   const std::string& body = "", const std::string& extra_headers = "") {
    std::string request = method + " " + target + " HTTP/1.1\r\nHost: test\r\n" + extra_headers;
    if (!body.empty() || method == "POST") {
      request += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    }
    request += "\r\n" + body;
    return Send(request);
  }

  // Reads one response: status line and headers, then the whole body. nullopt on EOF/timeout
  // before a complete response.
  std::optional<ClientResponse> ReadResponse() {
    std::optional<ClientResponse> response = ReadHead();
    if (!response) return std::nullopt;
    auto te = response->headers.find("transfer-encoding");
    if (te != response->headers.end() && te->second == "chunked") {
      for (;;) {
        std::optional<std::string> chunk = ReadChunk();
        if (!chunk) return std::nullopt;
        if (chunk->empty()) break;
        response->chunks.push_back(*chunk);
        response->body += *chunk;
      }
      return response;
    }
    auto length = response->headers.find("content-length");
    if (length != response->headers.end()) {
      const size_t size = std::stoul(length->second);
      if (!Fill(size)) return std::nullopt;
      response->body = buffer_.substr(0, size);
      buffer_.erase(0, size);
      return response;
    }
    while (FillMore()) {
    }
    response->body = std::move(buffer_);
    buffer_.clear();
    return response;
  }

  // Reads the status line and headers only (for streamed responses).
  std::optional<ClientResponse> ReadHead() {
    size_t end;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!FillMore()) return std::nullopt;
    }
    const std::string head = buffer_.substr(0, end);
    buffer_.erase(0, end + 4);
    ClientResponse response;
    size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    if (status_line.size() < 12) return std::nullopt;
    response.status = std::stoi(status_line.substr(9, 3));
    while (line_end != std::string::npos) {
      const size_t start = line_end + 2;
      line_end = head.find("\r\n", start);
      const std::string line = head.substr(start, line_end - start);
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t value_start = colon + 1;
      while (value_start < line.size() && line[value_start] == ' ') ++value_start;
      response.headers[name] = line.substr(value_start);
    }
    return response;
  }

  // Reads one chunk of a chunked body; "" for the last chunk, nullopt on EOF/timeout.
  std::optional<std::string> ReadChunk() {
    size_t line_end;
    while ((line_end = buffer_.find("\r\n")) == std::string::npos) {
      if (!FillMore()) return std::nullopt;
    }
    const size_t size = std::stoul(buffer_.substr(0, line_end), nullptr, 16);
    buffer_.erase(0, line_end + 2);
    if (!Fill(size + 2)) return std::nullopt;
    std::string chunk = buffer_.substr(0, size);
    buffer_.erase(0, size + 2);
    return chunk;
  }

  // True when the server closed the connection (EOF) before sending anything more.
  bool ReadsEof() { return buffer_.empty() && !FillMore(); }

  const std::string& buffered() const { return buffer_; }

 private:
  bool Fill(size_t size) {
    while (buffer_.size() < size) {
      if (!FillMore()) return false;
    }
    return true;
  }
  bool FillMore() {
    char data[16384];
    const ssize_t n = ::recv(fd_, data, sizeof(data), 0);
    if (n <= 0) return false;
    buffer_.append(data, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_COMMON_HTTP_TEST_CLIENT_H_
