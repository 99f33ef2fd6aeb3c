#include "kvtransfer/frame.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kvtransfer/wire.h"

namespace tandem::kv {

const char* FrameTypeName(FrameType type) {
  switch (type) {
    case FrameType::kHello:
      return "hello";
    case FrameType::kChallenge:
      return "challenge";
    case FrameType::kAuth:
      return "auth";
    case FrameType::kWelcome:
      return "welcome";
    case FrameType::kReject:
      return "reject";
    case FrameType::kWrite:
      return "write";
    case FrameType::kAck:
      return "ack";
    case FrameType::kNack:
      return "nack";
    case FrameType::kNotify:
      return "notify";
    case FrameType::kNotifyAck:
      return "notify_ack";
    case FrameType::kBye:
      return "bye";
    case FrameType::kFlush:
      return "flush";
    case FrameType::kControl:
      return "control";
    case FrameType::kControlReply:
      return "control_reply";
    case FrameType::kWriteMulti:
      return "write_multi";
  }
  return "unknown";
}

std::array<char, kFrameHeaderSize> EncodeHeader(const FrameHeader& h) {
  std::string s;
  s.reserve(kFrameHeaderSize);
  WireWriter w(&s);
  w.U32(kFrameMagic);
  w.U8(kFrameVersion);
  w.U8(static_cast<uint8_t>(h.type));
  w.U16(h.flags);
  w.U64(h.session);
  w.U64(h.batch);
  w.U32(h.region);
  w.U32(h.code);
  w.U64(h.offset);
  w.U64(h.length);
  std::array<char, kFrameHeaderSize> out;
  std::memcpy(out.data(), s.data(), kFrameHeaderSize);
  return out;
}

absl::StatusOr<FrameHeader> ParseHeader(const void* data, size_t size) {
  if (size != kFrameHeaderSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame header is ", size, " bytes, expected ", kFrameHeaderSize));
  }
  WireReader r(data, size);
  ASSIGN_OR_RETURN(uint32_t magic, r.U32("magic"));
  if (magic != kFrameMagic) return absl::InvalidArgumentError("frame: bad magic");
  ASSIGN_OR_RETURN(uint8_t version, r.U8("version"));
  if (version != kFrameVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame: version ", version, " not supported (expected ", kFrameVersion, ")"));
  }
  ASSIGN_OR_RETURN(uint8_t type, r.U8("type"));
  if (type == 0 || type > kMaxFrameType) {
    return absl::InvalidArgumentError(absl::StrCat("frame: unknown type ", type));
  }
  FrameHeader h;
  h.type = static_cast<FrameType>(type);
  ASSIGN_OR_RETURN(h.flags, r.U16("flags"));
  if ((h.flags & ~kKnownFlags) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("frame: unknown flags 0x", absl::Hex(h.flags)));
  }
  ASSIGN_OR_RETURN(h.session, r.U64("session"));
  ASSIGN_OR_RETURN(h.batch, r.U64("batch"));
  ASSIGN_OR_RETURN(h.region, r.U32("region"));
  ASSIGN_OR_RETURN(h.code, r.U32("code"));
  ASSIGN_OR_RETURN(h.offset, r.U64("offset"));
  ASSIGN_OR_RETURN(h.length, r.U64("length"));
  return h;
}

std::string EncodeHello(const HelloBody& b) {
  std::string out;
  WireWriter w(&out);
  w.Bytes(b.client_nonce);
  w.Bytes(b.client_name);
  std::string compat;
  EncodeCompat(b.compat, &compat);
  w.Bytes(compat);
  return out;
}

absl::StatusOr<HelloBody> DecodeHello(const std::string& body) {
  WireReader r(body.data(), body.size());
  HelloBody b;
  ASSIGN_OR_RETURN(b.client_nonce, r.Bytes("hello.nonce", kNonceSize), "hello: ");
  if (b.client_nonce.size() != kNonceSize) return absl::InvalidArgumentError("hello: short nonce");
  ASSIGN_OR_RETURN(b.client_name, r.Bytes("hello.name", kMaxNameBytes), "hello: ");
  if (b.client_name.empty()) return absl::InvalidArgumentError("hello: empty client name");
  ASSIGN_OR_RETURN(std::string compat, r.Bytes("hello.compat", 4 * kMaxDescriptorString),
                   "hello: ");
  ASSIGN_OR_RETURN(b.compat, DecodeCompat(compat), "hello: ");
  RETURN_IF_ERROR(r.ExpectEnd("hello"));
  return b;
}

std::string EncodeChallenge(const ChallengeBody& b) {
  std::string out;
  WireWriter w(&out);
  w.Bytes(b.server_nonce);
  w.Bytes(b.server_proof);
  w.Bytes(b.server_name);
  return out;
}

absl::StatusOr<ChallengeBody> DecodeChallenge(const std::string& body) {
  WireReader r(body.data(), body.size());
  ChallengeBody b;
  ASSIGN_OR_RETURN(b.server_nonce, r.Bytes("challenge.nonce", kNonceSize), "challenge: ");
  ASSIGN_OR_RETURN(b.server_proof, r.Bytes("challenge.proof", kProofSize), "challenge: ");
  if (b.server_nonce.size() != kNonceSize || b.server_proof.size() != kProofSize) {
    return absl::InvalidArgumentError("challenge: short nonce or proof");
  }
  ASSIGN_OR_RETURN(b.server_name, r.Bytes("challenge.name", kMaxNameBytes), "challenge: ");
  RETURN_IF_ERROR(r.ExpectEnd("challenge"));
  return b;
}

absl::Status CheckAuthBody(const std::string& body) {
  if (body.size() != kProofSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("auth: proof is ", body.size(), " bytes, expected ", kProofSize));
  }
  return absl::OkStatus();
}

absl::Status CheckReasonBody(const std::string& body) {
  if (body.size() > kMaxReasonBytes) {
    return absl::InvalidArgumentError(absl::StrCat("reason is ", body.size(), " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<PackedWrite>> ParsePackedWrites(const void* body, size_t size) {
  WireReader r(body, size);
  ASSIGN_OR_RETURN(uint32_t count, r.U32("packed count"), "write_multi: ");
  if (count == 0 || count > kMaxPackedWrites || count > r.remaining() / kPackedEntryBytes) {
    return absl::InvalidArgumentError(absl::StrCat("write_multi: bad write count ", count));
  }
  std::vector<PackedWrite> writes(count);
  uint64_t total = 0;
  for (PackedWrite& w : writes) {
    ASSIGN_OR_RETURN(w.region, r.U32("packed region"), "write_multi: ");
    ASSIGN_OR_RETURN(w.offset, r.U64("packed offset"), "write_multi: ");
    ASSIGN_OR_RETURN(w.length, r.U64("packed length"), "write_multi: ");
    if (w.length > r.remaining() || total + w.length > r.remaining()) {
      return absl::InvalidArgumentError("write_multi: payload lengths exceed the frame");
    }
    total += w.length;
  }
  if (total != r.remaining()) {
    return absl::InvalidArgumentError(absl::StrCat("write_multi: entries describe ", total,
                                                   " payload bytes, frame has ", r.remaining()));
  }
  const uint8_t* p = static_cast<const uint8_t*>(body) + (size - r.remaining());
  for (PackedWrite& w : writes) {
    w.data = p;
    p += w.length;
  }
  return writes;
}

}  // namespace tandem::kv
