// TLS for HttpServer: the server-side OpenSSL context built from PEM files.
//
// TLS 1.2 or newer, OpenSSL's default cipher suites, no renegotiation or compression. The
// certificate file holds the chain (leaf first); the key must match the leaf, which is checked
// here so that a wrong pair fails at start-up, not at a client's first handshake.
// Stateless functions; thread-safe.
#ifndef TANDEM_COMMON_HTTP_TLS_H_
#define TANDEM_COMMON_HTTP_TLS_H_

#include <string>

#include "absl/status/status.h"

namespace tandem {

// OK when the pair would serve TLS: both files readable PEM, the key matching the certificate.
// Errors name the file and what is wrong with it.
absl::Status CheckTlsFiles(const std::string& cert_file, const std::string& key_file);

}  // namespace tandem

#endif  // TANDEM_COMMON_HTTP_TLS_H_
