// libFuzzer entry point for the KV control plane: the sealed ControlMessages a decode worker and a
// prefill worker exchange (worker/handoff/control_channel.h) and the transfer descriptor a
// RegisterPeer carries (kvtransfer/descriptor.h), as the receiving side handles them.
//
// The first input byte picks how the rest is used:
//   even: the bytes exactly as they arrive on the bootstrap socket (authenticator || payload);
//   odd:  a payload that this target seals with the cluster secret first, so that mutations
//         reach the protobuf parser and the checks behind the authenticator.
// Properties (a violation traps):
//   - OpenControl returns a Status with a message or a message of version 1 with a body;
//   - what it accepts carries a valid HMAC-SHA256 of the payload under the cluster secret, fails
//     under another secret and with a flipped authenticator bit, and survives SealControl ->
//     OpenControl unchanged;
//   - a correctly sealed payload is refused only as InvalidArgument (never Unauthenticated);
//   - a RegisterPeer's descriptor decodes to a Status or to a descriptor that re-encodes to the
//     same bytes;
//   - a RoomRegistration's budget_ms, whatever its value, gives a monotonic deadline between now
//     and kMaxRoomBudget from now.
// Build and run: scripts/fuzz.sh control_fuzz (fuzz/CMakeLists.txt compiles only
// control_channel.cc, the generated kv_control.pb.cc and kvtransfer's wire codecs).
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/time/time.h"
#include "google/protobuf/stubs/logging.h"
#include "kvtransfer/descriptor.h"
#include "proto/kv_control.pb.h"
#include "worker/handoff/control_channel.h"
#include "worker/handoff/handoff_clock.h"

namespace {

// The secret the committed seeds are sealed with (fuzz/make_seeds.cc uses the same one).
const std::string kSecret = "tandem-fuzz-cluster-secret-0001";
const std::string kOtherSecret = "tandem-fuzz-cluster-secret-0002";
// control_channel.cc's domain separator: checked against SealControl at start-up, so a change
// there stops this target loudly instead of silently sealing payloads that never verify.
constexpr char kDomain[] = "tandem-kv-control-v1";

[[noreturn]] void Finding(const char* what) {
  std::fprintf(stderr, "control_fuzz: %s\n", what);
  __builtin_trap();
}

std::string Hmac(const std::string& secret, const std::string& payload) {
  const std::string data = std::string(kDomain) + payload;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

bool SetUpOnce() {
  // proto3 refuses a string field with ill-formed UTF-8 and logs each refusal; the refusal is the
  // behaviour under test, the log line only slows the run down.
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  tandem::proto::ControlMessage m;
  m.mutable_room_abort()->set_bootstrap_room(7);
  const std::string sealed = tandem::worker::SealControl(kSecret, m);
  const std::string payload = sealed.substr(tandem::worker::kControlMacBytes);
  if (sealed.substr(0, tandem::worker::kControlMacBytes) != Hmac(kSecret, payload)) {
    Finding("SealControl no longer matches HMAC(secret, kDomain || payload): update kDomain");
  }
  return true;
}

// The receiving side's use of an accepted message's fields.
void Handle(const tandem::proto::ControlMessage& m) {
  if (m.has_register_peer()) {
    const std::string& bytes = m.register_peer().transfer_descriptor();
    auto d = tandem::kv::DecodeDescriptor(bytes);
    if (d.ok()) {
      if (tandem::kv::EncodeDescriptor(*d) != bytes) Finding("descriptor is not canonical");
    } else if (d.status().message().empty()) {
      Finding("descriptor error without a message");
    }
    tandem::kv::CompatibilityRecord local;
    local.model_id = "tandem-tiny/0123456789abcdef";
    local.dtype = "bf16";
    (void)tandem::kv::DecodePeerDescriptor("tcp", bytes, local);
  } else if (m.has_room_registration()) {
    // The prefill worker turns the budget into a monotonic deadline: any int64 must give one
    // no earlier than now and no later than kMaxRoomBudget from now (no overflow).
    const auto now = tandem::MonoNow();
    const tandem::Deadline d = tandem::worker::DeadlineFromBudget(m.room_registration().budget_ms(),
                                                                  now, absl::Seconds(90));
    if (d.when() < now || d.when() > now + tandem::worker::kMaxRoomBudget) {
      Finding("a room's budget gives a deadline outside [now, now + kMaxRoomBudget]");
    }
  }
}

// Checks everything an accepted (`opened`) message from `bytes` must satisfy.
void CheckAccepted(const std::string& bytes, const tandem::proto::ControlMessage& opened) {
  using tandem::worker::kControlMacBytes;
  if (opened.version() != tandem::proto::CONTROL_PLANE_VERSION_1) Finding("accepted version");
  if (opened.body_case() == tandem::proto::ControlMessage::BODY_NOT_SET) Finding("no body");
  const std::string payload = bytes.substr(kControlMacBytes);
  const std::string mac = Hmac(kSecret, payload);
  if (CRYPTO_memcmp(mac.data(), bytes.data(), kControlMacBytes) != 0) {
    Finding("accepted a message whose authenticator does not verify");
  }
  auto other = tandem::worker::OpenControl(kOtherSecret, bytes);
  if (other.ok() || other.status().code() != absl::StatusCode::kUnauthenticated) {
    Finding("a message sealed with one secret opened under another");
  }
  std::string flipped = bytes;
  flipped[payload.size() % kControlMacBytes] ^= 0x01;
  if (tandem::worker::OpenControl(kSecret, flipped).ok()) Finding("accepted a flipped MAC bit");

  const std::string resealed = tandem::worker::SealControl(kSecret, opened);
  auto again = tandem::worker::OpenControl(kSecret, resealed);
  if (!again.ok()) Finding("a re-sealed accepted message does not open");
  if (again->SerializeAsString() != opened.SerializeAsString()) {
    Finding("a re-sealed message changed on the way");
  }
  Handle(opened);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool set_up = SetUpOnce();
  (void)set_up;
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const bool seal = (data[0] & 1) != 0;
  const std::string bytes = seal ? Hmac(kSecret, rest) + rest : rest;

  auto opened = tandem::worker::OpenControl(kSecret, bytes);
  if (!opened.ok()) {
    if (opened.status().message().empty()) Finding("error without a message");
    if (seal && bytes.size() <= tandem::worker::kMaxControlBytes &&
        opened.status().code() != absl::StatusCode::kInvalidArgument) {
      Finding("a correctly sealed payload was refused as something other than InvalidArgument");
    }
    return 0;
  }
  CheckAccepted(bytes, *opened);
  return 0;
}
