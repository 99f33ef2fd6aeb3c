// Test support for TLS: a throw-away self-signed certificate made at test time (never
// committed) and a small HTTPS client on Beast that verifies the server against it.
#ifndef TANDEM_TESTS_SECURITY_TLS_TEST_UTIL_H_
#define TANDEM_TESTS_SECURITY_TLS_TEST_UTIL_H_

#include <string>

namespace tandem::sectest {

struct TestCertificate {
  std::string cert_file;  // PEM, CN=localhost, SAN IP:127.0.0.1 + DNS:localhost, valid 1 day
  std::string key_file;   // PEM, EC P-256, mode 0600
};

// Writes a fresh key and certificate as `dir`/`name`-<pid>.{crt,key} (the paths are returned).
// Aborts the test on failure.
TestCertificate MakeSelfSignedCertificate(const std::string& dir, const std::string& name);

struct TlsReply {
  int status = 0;     // 0: no HTTP answer
  std::string error;  // why, when status is 0 (handshake, verification, I/O)
  std::string body;
};

// One HTTPS request to 127.0.0.1:port, verifying the server's certificate against `ca_file`
// (and its name against 127.0.0.1). `headers` are extra "Name: value" lines, CRLF-separated.
TlsReply TlsRequest(int port, const std::string& ca_file, const std::string& method,
                    const std::string& target, const std::string& body = "",
                    const std::string& headers = "", int timeout_seconds = 30);

}  // namespace tandem::sectest

#endif  // TANDEM_TESTS_SECURITY_TLS_TEST_UTIL_H_
