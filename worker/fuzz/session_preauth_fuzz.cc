// libFuzzer entry point for the worker's session socket before authentication: the bytes a
// stranger can send on --session-port, cut into frames by the worker's FrameReader with the
// pre-authentication limit (common/frames.h, worker/session_preauth.h), and the first frame
// checked by OpenFirstSessionMessage; after it is accepted the limit rises as the worker's does
// and the rest is parsed as SessionUps.
//
// The first input byte picks how the rest is used:
//   even: the bytes exactly as they arrive on the socket;
//   odd:  a SessionUp payload whose `auth` this target replaces with a valid token for the
//         challenge, framed, followed by the remaining bytes as they arrive; so that mutations
//         reach the authenticated path.
// The second byte (when present) sets the read size, as the socket's reads cut the stream.
// Properties (a violation traps):
//   - no frame before the first accepted message is larger than kMaxPreAuthFrameBytes, none after
//     larger than kMaxSessionFrameBytes, and the reader never holds more than it was given;
//   - an accepted first message carries a token that verifies for this challenge under the secret
//     and not under another secret nor for another challenge;
//   - a refusal is InvalidArgument or Unauthenticated with a message;
//   - in odd mode, a first frame within the limit that parses is accepted.
// Build and run: scripts/fuzz.sh session_preauth_fuzz (fuzz/CMakeLists.txt compiles only
// session_preauth.cc, frames.cc, cluster_token.cc and the generated worker.pb.cc).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "absl/time/clock.h"
#include "common/cluster_token.h"
#include "common/frames.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/worker.pb.h"
#include "worker/session_preauth.h"

namespace {

const std::string kSecret = "tandem-fuzz-cluster-secret-0001";
const std::string kOtherSecret = "tandem-fuzz-cluster-secret-0002";
const std::string kChallenge = "tandem-session-v1 00112233445566778899aabbccddeeff";
const std::string kAudience = "tandem-fuzz-worker-instance";

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "session_preauth_fuzz: property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  // Parse failures are expected; protobuf's log lines would only slow the run.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const bool seal = (data[0] & 1) != 0;
  const size_t read_size = 1 + data[1] % 64;  // socket reads of 1..64 bytes
  std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);
  const absl::Time now = absl::Now();

  std::string stream;
  bool expect_accept = false;
  if (seal) {
    // The first half is the payload the target authenticates; the second what follows it.
    const size_t half = rest.size() / 2;
    tandem::proto::SessionUp up;
    if (!up.ParseFromArray(rest.data(), static_cast<int>(half))) return 0;
    up.set_auth(tandem::MakeClusterToken(kSecret, kChallenge, kAudience, now));
    const std::string payload = up.SerializeAsString();
    tandem::AppendFrame(&stream, payload);
    expect_accept = payload.size() <= tandem::worker::kMaxPreAuthFrameBytes;
    rest.remove_prefix(half);
  }
  stream.append(rest);

  tandem::FrameReader reader(tandem::worker::kMaxPreAuthFrameBytes);
  bool authed = false;
  bool first_seen = false;
  size_t given = 0;
  tandem::proto::SessionUp up;
  for (size_t at = 0; at < stream.size();) {
    const size_t n = std::min(read_size, stream.size() - at);
    std::memcpy(reader.Prepare(n), stream.data() + at, n);
    reader.Commit(n);
    at += n;
    given += n;
    Check(reader.buffered() <= given, "the reader holds more than it was given");
    while (true) {
      absl::StatusOr<std::optional<std::string_view>> frame = reader.Next();
      if (!frame.ok()) {
        Check(!frame.status().message().empty(), "a frame error without a message");
        Check(!expect_accept || first_seen, "a sealed first frame within the limit was refused");
        return 0;
      }
      if (!frame->has_value()) break;
      const size_t limit =
          authed ? tandem::kMaxSessionFrameBytes : tandem::worker::kMaxPreAuthFrameBytes;
      Check((*frame)->size() <= limit, "a frame above the current limit");
      if (authed) {
        (void)up.ParseFromArray((*frame)->data(), static_cast<int>((*frame)->size()));
        continue;
      }
      first_seen = true;
      const absl::Status s = tandem::worker::OpenFirstSessionMessage(kSecret, kChallenge, kAudience,
                                                                     **frame, now, &up);
      if (!s.ok()) {
        Check(s.code() == absl::StatusCode::kInvalidArgument ||
                  s.code() == absl::StatusCode::kUnauthenticated,
              "a refusal that is neither InvalidArgument nor Unauthenticated");
        Check(!s.message().empty(), "a refusal without a message");
        Check(!expect_accept, "a sealed first message within the limit was refused");
        return 0;
      }
      Check(tandem::VerifyClusterToken(kSecret, kChallenge, kAudience, up.auth(), now).ok(),
            "an accepted first message whose token does not verify");
      Check(!tandem::VerifyClusterToken(kOtherSecret, kChallenge, kAudience, up.auth(), now).ok(),
            "an accepted token verifies under another secret");
      Check(!tandem::VerifyClusterToken(kSecret, "tandem-session-v1 ff", kAudience, up.auth(), now)
                 .ok(),
            "an accepted token verifies for another challenge");
      authed = true;
      reader.set_max_frame(tandem::kMaxSessionFrameBytes);
    }
  }
  return 0;
}
