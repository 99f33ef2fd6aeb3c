#include "worker/session_preauth.h"

#include "absl/strings/str_cat.h"
#include "common/cluster_token.h"

namespace tandem::worker {

absl::Status OpenFirstSessionMessage(std::string_view secret, std::string_view challenge,
                                     std::string_view audience, std::string_view frame,
                                     absl::Time now, proto::SessionUp* up) {
  up->Clear();
  if (!up->ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", frame.size(), "-byte message on the session socket is not a SessionUp"));
  }
  if (secret.empty()) return absl::OkStatus();
  const absl::Status auth = VerifyClusterToken(secret, challenge, audience, up->auth(), now);
  if (!auth.ok()) return absl::UnauthenticatedError(auth.message());
  return absl::OkStatus();
}

bool PreAuthAdmission::TryAdmit(const std::string& address) {
  if (total_ >= max_total_) return false;
  int& count = by_address_[address];
  if (count >= max_per_address_) return false;
  ++count;
  ++total_;
  return true;
}

void PreAuthAdmission::Leave(const std::string& address) {
  auto it = by_address_.find(address);
  if (it == by_address_.end()) return;
  --total_;
  if (--it->second <= 0) by_address_.erase(it);
}

}  // namespace tandem::worker
