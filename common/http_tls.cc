#include "common/http_tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/http_tls_context.h"

namespace tandem {
namespace http_internal {
namespace {

std::string OpenSslError(const boost::system::error_code& ec) {
  std::string text = ec.message();
  // Boost's message for an OpenSSL error is often bare; the error queue says more.
  if (const unsigned long e = ERR_get_error(); e != 0) {
    char buffer[256];
    ERR_error_string_n(e, buffer, sizeof(buffer));
    text = buffer;
  }
  ERR_clear_error();
  return text;
}

absl::Status Readable(const std::string& what, const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat("no TLS ", what, " file given"));
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS ", what, " file '", path, "' cannot be read"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<boost::asio::ssl::context>> MakeTlsServerContext(
    const std::string& cert_file, const std::string& key_file) {
  namespace ssl = boost::asio::ssl;
  if (absl::Status s = Readable("certificate", cert_file); !s.ok()) return s;
  if (absl::Status s = Readable("key", key_file); !s.ok()) return s;
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                   ssl::context::no_compression | ssl::context::single_dh_use);
  SSL_CTX_set_options(ctx->native_handle(), SSL_OP_NO_RENEGOTIATION);
  boost::system::error_code ec;
  ctx->use_certificate_chain_file(cert_file, ec);
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS certificate file '", cert_file, "' is not a PEM certificate: ", OpenSslError(ec)));
  }
  ctx->use_private_key_file(key_file, ssl::context::pem, ec);
  // Boost has taken the error off OpenSSL's queue; its code is the packed OpenSSL error.
  if (ec && ec.category() == boost::asio::error::get_ssl_category() &&
      ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == X509_R_KEY_VALUES_MISMATCH) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS key file '", key_file, "' does not match the certificate in '", cert_file, "'"));
  }
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS key file '", key_file, "' is not a PEM private key: ", OpenSslError(ec)));
  }
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS key file '", key_file, "' does not match the certificate in '", cert_file, "'"));
  }
  return ctx;
}

}  // namespace http_internal

absl::Status CheckTlsFiles(const std::string& cert_file, const std::string& key_file) {
  return http_internal::MakeTlsServerContext(cert_file, key_file).status();
}

}  // namespace tandem
