#include "common/cluster_token.h"

#include <openssl/rand.h>

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <initializer_list>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/hmac.h"

namespace tandem {
namespace {

constexpr char kLabel[] = "tandem-grpc-v2";
constexpr char kVersion[] = "v2";
constexpr char kProofLabel[] = "tandem-worker-proof-v1";
constexpr size_t kHexHmacSize = 64;

std::string ToHex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    hex.push_back(kDigits[c >> 4]);
    hex.push_back(kDigits[c & 0xf]);
  }
  return hex;
}

// Length-prefixed fields after `label`: no two lists of fields share an encoding.
std::string FieldsHmac(std::string_view secret, std::string_view label,
                       std::initializer_list<std::string_view> fields) {
  std::string message(label);
  for (std::string_view field : fields) {
    absl::StrAppend(&message, "|", field.size(), ":");
    message.append(field.data(), field.size());
  }
  return ToHex(HmacSha256(secret, message));
}

std::string TokenHmac(std::string_view secret, std::string_view method, std::string_view audience,
                      std::string_view ms) {
  return FieldsHmac(secret, kLabel, {ms, method, audience});
}

absl::Status Refused(std::string_view why) {
  return absl::UnauthenticatedError(
      absl::StrCat("missing or wrong cluster secret: ", std::string(why)));
}

}  // namespace

std::string MakeClusterToken(std::string_view secret, std::string_view method,
                             std::string_view audience, absl::Time now) {
  const std::string ms = std::to_string(absl::ToUnixMillis(now));
  return absl::StrCat(kVersion, ".", ms, ".", TokenHmac(secret, method, audience, ms));
}

absl::Status VerifyClusterToken(std::string_view secret, std::string_view method,
                                std::string_view audience, std::string_view token, absl::Time now,
                                absl::Duration window) {
  if (token.empty()) {
    return Refused(absl::StrCat("the call carries no ", kClusterAuthMetadata,
                                " token (start the caller with the cluster secret)"));
  }
  const size_t first = token.find('.');
  const size_t second = first == std::string_view::npos ? first : token.find('.', first + 1);
  if (token.substr(0, first) == "v1") {
    // A v1 token names no worker: the caller predates audience-bound tokens.
    return Refused(absl::StrCat("a v1 ", kClusterAuthMetadata,
                                " token (the caller is older than this worker; v2 is required)"));
  }
  if (token.substr(0, first) != kVersion || second == std::string_view::npos ||
      token.size() - second - 1 != kHexHmacSize) {
    return Refused(absl::StrCat("malformed ", kClusterAuthMetadata, " token"));
  }
  const std::string_view ms_text = token.substr(first + 1, second - first - 1);
  int64_t ms = 0;
  auto [end, ec] = std::from_chars(ms_text.data(), ms_text.data() + ms_text.size(), ms);
  if (ms_text.empty() || ec != std::errc() || end != ms_text.data() + ms_text.size() || ms < 0) {
    return Refused(absl::StrCat("malformed ", kClusterAuthMetadata, " timestamp"));
  }
  // Check the proof before the clock, so a stranger learns nothing about our clock.
  const std::string expected = TokenHmac(secret, method, audience, ms_text);
  const std::string_view given = token.substr(second + 1);
  if (!ConstantTimeEquals(expected, given)) {
    return Refused(
        "the token's HMAC does not match this worker's secret and instance (a token made for "
        "another worker, another method or with another secret)");
  }
  const absl::Duration skew = absl::FromUnixMillis(ms) - now;
  if (absl::AbsDuration(skew) > window) {
    return Refused(absl::StrCat(
        "the token is ", absl::FormatDuration(skew), " away from this worker's clock (allowed: +-",
        absl::FormatDuration(window), "); a replayed token, or the hosts' clocks disagree"));
  }
  return absl::OkStatus();
}

std::string MakeWorkerProof(std::string_view secret, std::string_view nonce,
                            std::string_view target, std::string_view instance_id) {
  return FieldsHmac(secret, kProofLabel, {nonce, target, instance_id});
}

absl::Status VerifyWorkerProof(std::string_view secret, std::string_view nonce,
                               std::string_view target, std::string_view instance_id,
                               std::string_view proof) {
  auto refused = [](std::string_view why) {
    return absl::UnauthenticatedError(
        absl::StrCat("the worker did not prove the cluster secret: ", std::string(why)));
  };
  if (instance_id.empty() || instance_id.size() > kMaxProofFieldBytes) {
    return refused("its instance id is empty or too long");
  }
  for (char c : instance_id) {
    if (c <= ' ' || c > '~') return refused("its instance id is not printable ASCII");
  }
  if (proof.size() != kHexHmacSize) return refused("its proof is not 64 hex digits");
  const std::string expected = MakeWorkerProof(secret, nonce, target, instance_id);
  if (!ConstantTimeEquals(expected, proof)) {
    return refused("its proof's HMAC does not match this router's secret");
  }
  return absl::OkStatus();
}

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(bytes)) != 1) {
    return std::string();
  }
  return ToHex(raw);
}

absl::StatusOr<std::string> ResolveClusterSecret(const std::string& file, const std::string& value,
                                                 bool required) {
  std::string secret;
  std::string source;
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cluster-secret-file: cannot read '", file, "'"));
    }
    std::getline(in, secret);
    source = absl::StrCat("--cluster-secret-file '", file, "'");
  } else if (!value.empty()) {
    secret = value;
    source = "--cluster-secret";
  } else if (const char* env = std::getenv("TANDEM_CLUSTER_SECRET"); env != nullptr) {
    secret = env;
    source = "TANDEM_CLUSTER_SECRET";
  } else if (required) {
    return absl::InvalidArgumentError(
        "no cluster secret: give --cluster-secret-file, --cluster-secret or set "
        "TANDEM_CLUSTER_SECRET (the same value on every member of the cluster)");
  } else {
    return std::string();
  }
  secret = std::string(absl::StripAsciiWhitespace(secret));
  if (secret.size() < 16) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the cluster secret must be at least 16 bytes, got ", secret.size()));
  }
  return secret;
}

}  // namespace tandem
