// Frames of the tcp backend's wire protocol (also the rdma backend's control channel).
//
// A frame is one ZMQ multipart message: [48-byte header][body]. The header is little-endian:
//   u32 magic "TKVF" | u8 version | u8 type | u16 flags | u64 session | u64 batch | u32 region |
//   u32 code | u64 offset | u64 length
// `length` is the body size for kWrite (the payload) and must match it. Bodies of handshake
// frames are encoded with WireWriter (see the Encode*/Decode* pairs below).
//
// Handshake (per connection, client = the writer, server = the owner of the memory):
//   client kHello{client nonce, client name, client compat}  ->
//   <- server kChallenge{server nonce, server proof, server name}   (or kReject{reason})
//   client kAuth{client proof}                               ->
//   <- server kWelcome (header.session = the session id)        (or kReject{reason})
// The server checks the client's compatibility record only after kAuth succeeded, so a peer
// without the secret never learns the server's record. A kReject's header.code is the
// absl::StatusCode of the refusal (0 from older servers: treat as PERMISSION_DENIED); its reason
// is generic ("malformed hello", "too many pending handshakes", "authentication failed") unless
// the peer authenticated.
// Every later client frame carries the session id; the server drops frames whose connection has
// not completed the handshake or whose session id differs.
// Data: kWrite{region, offset, payload}; flag kFlagAck asks for a kAck once this frame and every
// earlier frame of the batch on that connection were applied. A rejected write is answered by
// kNack{batch, code, reason} at once. kNotify{body} is answered by kNotifyAck. kBye ends a session.
// kFlush{batch} asks for a kAck of that batch once every earlier frame on the connection was
// processed (sent instead of the batch's remaining frames after it was cancelled). Plain functions
// and values; thread-compatible.
#ifndef TANDEM_KVTRANSFER_FRAME_H_
#define TANDEM_KVTRANSFER_FRAME_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvtransfer/descriptor.h"

namespace tandem::kv {

inline constexpr uint32_t kFrameMagic = 0x46564B54;  // "TKVF" little-endian
inline constexpr uint8_t kFrameVersion = 1;
inline constexpr size_t kFrameHeaderSize = 48;
inline constexpr size_t kNonceSize = 32;
inline constexpr size_t kProofSize = 32;  // HMAC-SHA256
inline constexpr size_t kMaxReasonBytes = 4096;
inline constexpr size_t kMaxNameBytes = 256;
// A connection to a ZMQ endpoint of the cluster (the transfer engine, the bootstrap channel) that
// has not completed ZMTP's greeting within this many milliseconds is closed (ZMQ_HANDSHAKE_IVL;
// libzmq's default of 30 s let a stranger hold a half-open connection that long).
inline constexpr int kZmqHandshakeMs = 5000;

enum class FrameType : uint8_t {
  kHello = 1,
  kChallenge = 2,
  kAuth = 3,
  kWelcome = 4,
  kReject = 5,
  kWrite = 6,
  kAck = 7,
  kNack = 8,
  kNotify = 9,
  kNotifyAck = 10,
  kBye = 11,
  kFlush = 12,
  kControl = 13,
  kControlReply = 14,
  kWriteMulti = 15,
};
inline constexpr uint8_t kMaxFrameType = 15;

inline constexpr uint16_t kFlagAck = 1;  // kWrite: acknowledge the batch on this connection
inline constexpr uint16_t kKnownFlags = kFlagAck;

struct FrameHeader {
  FrameType type = FrameType::kHello;
  uint16_t flags = 0;
  uint64_t session = 0;
  uint64_t batch = 0;
  RegionId region = 0;
  uint32_t code = 0;  // kNack: absl::StatusCode of the rejection
  uint64_t offset = 0;
  uint64_t length = 0;
};

const char* FrameTypeName(FrameType type);

std::array<char, kFrameHeaderSize> EncodeHeader(const FrameHeader& h);
// Parses untrusted bytes: wrong size, magic, version, type or unknown flags are errors.
absl::StatusOr<FrameHeader> ParseHeader(const void* data, size_t size);

struct HelloBody {
  std::string client_nonce;  // kNonceSize bytes
  std::string client_name;
  CompatibilityRecord compat;
};
struct ChallengeBody {
  std::string server_nonce;  // kNonceSize bytes
  std::string server_proof;  // kProofSize bytes
  std::string server_name;
};

// The largest body DecodeHello can accept: the server refuses longer ones without copying them.
inline constexpr size_t kMaxHelloBytes =
    4 + kNonceSize + 4 + kMaxNameBytes + 4 + 4 * kMaxDescriptorString;

std::string EncodeHello(const HelloBody& b);
absl::StatusOr<HelloBody> DecodeHello(const std::string& body);
std::string EncodeChallenge(const ChallengeBody& b);
absl::StatusOr<ChallengeBody> DecodeChallenge(const std::string& body);
// kAuth's body is the raw proof; kReject/kNack bodies are a reason of at most kMaxReasonBytes.
absl::Status CheckAuthBody(const std::string& body);
absl::Status CheckReasonBody(const std::string& body);

// One write inside a kWriteMulti body; `data` points into the body.
struct PackedWrite {
  RegionId region = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  const uint8_t* data = nullptr;
};
inline constexpr size_t kMaxPackedWrites = 65536;
inline constexpr size_t kPackedEntryBytes = 20;
// Parses a kWriteMulti body (untrusted): the count, every entry and the payload sizes must add
// up exactly to the body.
absl::StatusOr<std::vector<PackedWrite>> ParsePackedWrites(const void* body, size_t size);

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_FRAME_H_
