#include "tests/security/tls_test_util.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <utility>  // before Boost.Asio, whose awaitable.hpp needs std::exchange

#include "boost/asio.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "boost/beast/ssl.hpp"
#include "gtest/gtest.h"

namespace tandem::sectest {
namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};

bool AddExtension(X509* cert, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

}  // namespace

TestCertificate MakeSelfSignedCertificate(const std::string& dir, const std::string& name) {
  // ctest runs each test case as its own process, several at once, all with the same TempDir:
  // the process id keeps one case from overwriting the files another case's server is using.
  const std::string base = dir + "/" + name + "-" + std::to_string(::getpid());
  TestCertificate out{base + ".crt", base + ".key"};
  std::unique_ptr<EVP_PKEY, PkeyFree> key(EVP_EC_gen("P-256"));
  EXPECT_NE(key, nullptr);
  std::unique_ptr<X509, X509Free> cert(X509_new());
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
  X509_set_issuer_name(cert.get(), subject);
  EXPECT_TRUE(AddExtension(cert.get(), NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"));
  EXPECT_TRUE(AddExtension(cert.get(), NID_basic_constraints, "critical,CA:TRUE"));
  EXPECT_GT(X509_sign(cert.get(), key.get(), EVP_sha256()), 0);

  FILE* f = std::fopen(out.key_file.c_str(), "w");
  EXPECT_NE(f, nullptr);
  ::chmod(out.key_file.c_str(), 0600);
  EXPECT_EQ(PEM_write_PrivateKey(f, key.get(), nullptr, nullptr, 0, nullptr, nullptr), 1);
  std::fclose(f);
  f = std::fopen(out.cert_file.c_str(), "w");
  EXPECT_NE(f, nullptr);
  EXPECT_EQ(PEM_write_X509(f, cert.get()), 1);
  std::fclose(f);
  return out;
}

TlsReply TlsRequest(int port, const std::string& ca_file, const std::string& method,
                    const std::string& target, const std::string& body, const std::string& headers,
                    int timeout_seconds) {
  TlsReply reply;
  try {
    net::io_context ioc;
    net::ssl::context ctx(net::ssl::context::tls_client);
    ctx.load_verify_file(ca_file);
    ctx.set_verify_mode(net::ssl::verify_peer);
    beast::ssl_stream<beast::tcp_stream> stream(ioc, ctx);
    stream.set_verify_callback(net::ssl::host_name_verification("127.0.0.1"));
    beast::get_lowest_layer(stream).expires_after(std::chrono::seconds(timeout_seconds));
    beast::get_lowest_layer(stream).connect(
        net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)));
    stream.handshake(net::ssl::stream_base::client);
    http::request<http::string_body> request(http::string_to_verb(method), target, 11);
    request.set(http::field::host, "127.0.0.1");
    size_t at = 0;
    while (at < headers.size()) {
      size_t end = headers.find("\r\n", at);
      if (end == std::string::npos) end = headers.size();
      const std::string line = headers.substr(at, end - at);
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        request.set(line.substr(0, colon), line.substr(line.find_first_not_of(' ', colon + 1)));
      }
      at = end + 2;
    }
    request.body() = body;
    request.prepare_payload();
    http::write(stream, request);
    beast::flat_buffer buffer;
    http::response<http::string_body> response;
    http::read(stream, buffer, response);
    reply.status = static_cast<int>(response.result_int());
    reply.body = response.body();
    beast::error_code ignored;
    stream.shutdown(ignored);
  } catch (const std::exception& e) {
    reply.status = 0;
    reply.error = e.what();
  }
  return reply;
}

}  // namespace tandem::sectest
