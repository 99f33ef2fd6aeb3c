#include "worker/handoff/control_channel.h"

#include "absl/strings/str_cat.h"
#include "common/hmac.h"

namespace tandem::worker {
namespace {

constexpr char kDomain[] = "tandem-kv-control-v1";

std::string Mac(const std::string& secret, const std::string& payload) {
  return HmacSha256(secret, std::string(kDomain) + payload);
}

}  // namespace

std::string SealControl(const std::string& secret, proto::ControlMessage message) {
  message.set_version(proto::CONTROL_PLANE_VERSION_1);
  const std::string payload = message.SerializeAsString();
  return Mac(secret, payload) + payload;
}

absl::StatusOr<proto::ControlMessage> OpenControl(const std::string& secret,
                                                  const std::string& bytes) {
  if (bytes.size() < kControlMacBytes) {
    return absl::InvalidArgumentError(absl::StrCat("control message of ", bytes.size(),
                                                   " bytes is shorter than its ", kControlMacBytes,
                                                   "-byte authenticator"));
  }
  if (bytes.size() > kMaxControlBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "control message of ", bytes.size(), " bytes exceeds the limit of ", kMaxControlBytes));
  }
  const std::string payload = bytes.substr(kControlMacBytes);
  const std::string expected = Mac(secret, payload);
  if (!ConstantTimeEquals(expected, std::string_view(bytes).substr(0, kControlMacBytes))) {
    return absl::UnauthenticatedError(
        "control message fails authentication: the peer does not hold this cluster's secret");
  }
  proto::ControlMessage m;
  if (!m.ParseFromString(payload)) {
    return absl::InvalidArgumentError("control message does not parse as a ControlMessage");
  }
  if (m.version() != proto::CONTROL_PLANE_VERSION_1) {
    return absl::InvalidArgumentError(absl::StrCat("control-plane version ",
                                                   static_cast<int>(m.version()),
                                                   " is not supported (this worker "
                                                   "speaks version 1)"));
  }
  if (m.body_case() == proto::ControlMessage::BODY_NOT_SET) {
    return absl::InvalidArgumentError("control message has no body");
  }
  return m;
}

bool ControlFromMember(const std::string& bytes,
                       const absl::StatusOr<proto::ControlMessage>& result) {
  if (result.ok()) return true;
  return result.status().code() == absl::StatusCode::kInvalidArgument &&
         bytes.size() >= kControlMacBytes && bytes.size() <= kMaxControlBytes;
}

}  // namespace tandem::worker
