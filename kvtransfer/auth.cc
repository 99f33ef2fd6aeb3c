#include "kvtransfer/auth.h"

#include <openssl/rand.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/hmac.h"
#include "kvtransfer/frame.h"

namespace tandem::kv {

absl::Status ValidateClusterSecret(const std::string& secret) {
  if (secret.size() < kMinSecretBytes) {
    return absl::InvalidArgumentError(absl::StrCat("cluster secret is ", secret.size(),
                                                   " bytes; at least ", kMinSecretBytes,
                                                   " are required"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> LoadClusterSecretFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("cluster secret file ", path, ": ", std::strerror(errno)));
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cluster secret file ", path, " is accessible by group or others; chmod 600 it"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open cluster secret file ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string secret = ss.str();
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  absl::Status valid = ValidateClusterSecret(secret);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", valid.message()));
  }
  return secret;
}

std::string MakeNonce() {
  std::string nonce(kNonceSize, '\0');
  // The CSPRNG failing is not recoverable: a predictable nonce would defeat the handshake.
  TANDEM_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), kNonceSize) == 1,
               "the CSPRNG failed");
  return nonce;
}

uint64_t MakeSessionId() {
  uint64_t id = 0;
  while (id == 0) {
    TANDEM_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(&id), sizeof(id)) == 1,
                 "the CSPRNG failed");
  }
  return id;
}

std::string ComputeProof(const std::string& secret, AuthRole role, const std::string& client_nonce,
                         const std::string& server_nonce, const std::string& client_name,
                         const std::string& server_name) {
  // Length-prefix every variable field so that no two inputs share an encoding.
  std::string msg = "tandem-kv-auth-v1";
  msg.push_back(role == AuthRole::kClient ? 'C' : 'S');
  for (const std::string* f : {&client_nonce, &server_nonce, &client_name, &server_name}) {
    uint32_t n = static_cast<uint32_t>(f->size());
    msg.append(reinterpret_cast<const char*>(&n), sizeof(n));
    msg.append(*f);
  }
  return HmacSha256(secret, msg);
}

bool ProofEquals(const std::string& a, const std::string& b) { return ConstantTimeEquals(a, b); }

}  // namespace tandem::kv
