// Internal to HttpServer (common/http_*.cc): the OpenSSL context behind common/http_tls.h.
#ifndef TANDEM_COMMON_HTTP_TLS_CONTEXT_H_
#define TANDEM_COMMON_HTTP_TLS_CONTEXT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "boost/asio/ssl.hpp"

namespace tandem::http_internal {

// A server context serving `cert_file` (PEM chain) with `key_file` (PEM key); see http_tls.h.
absl::StatusOr<std::unique_ptr<boost::asio::ssl::context>> MakeTlsServerContext(
    const std::string& cert_file, const std::string& key_file);

}  // namespace tandem::http_internal

#endif  // TANDEM_COMMON_HTTP_TLS_CONTEXT_H_
