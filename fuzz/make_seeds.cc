// Writes the seed corpora of the binary-protocol fuzzers with the real encoders, so that the seeds
// follow the wire formats when they change:
//   build-fuzz/bin/make_seeds <repo root>
// writes kvtransfer/fuzz/corpus/ (frame_fuzz: a 48-byte frame header + body, and bare bodies)
// and worker/handoff/fuzz/corpus/ (control_fuzz: mode byte + sealed message or payload; see
// worker/handoff/fuzz/control_fuzz.cc). Deterministic: nonces and proofs are fixed bytes.
#include <cstdio>
#include <fstream>
#include <string>

#include "kvtransfer/descriptor.h"
#include "kvtransfer/frame.h"
#include "kvtransfer/wire.h"
#include "proto/kv_control.pb.h"
#include "worker/handoff/control_channel.h"

namespace {

namespace kv = tandem::kv;
namespace proto = tandem::proto;

const std::string kSecret = "tandem-fuzz-cluster-secret-0001";  // as control_fuzz.cc

bool Write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "make_seeds: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

kv::CompatibilityRecord Compat() {
  kv::CompatibilityRecord c;
  c.model_id = "tandem-tiny/0123456789abcdef";
  c.layer_count = 4;
  c.kv_heads = 2;
  c.head_dim = 32;
  c.dtype = "bf16";
  c.block_size = 16;
  c.layout = "layer-major/[block][kv][token][head][dim]";
  return c;
}

kv::Descriptor Descriptor(const std::string& backend) {
  kv::Descriptor d;
  d.backend = backend;
  d.engine_name = "decode-0";
  d.endpoints = {"tcp://127.0.0.1:17001", "tcp://127.0.0.1:17002"};
  d.regions = {{1, 1 << 20, false, 0, 0},
               {2, 4096, true, backend == "rdma" ? 0x7f0000 : 0u, backend == "rdma" ? 77u : 0u}};
  d.compat = Compat();
  return d;
}

std::string Frame(kv::FrameType type, const std::string& body, uint64_t session = 0x1122) {
  kv::FrameHeader h;
  h.type = type;
  h.session = session;
  h.batch = 3;
  h.region = 1;
  h.offset = 4096;
  h.length = body.size();
  if (type == kv::FrameType::kWrite) h.flags = kv::kFlagAck;
  const auto header = kv::EncodeHeader(h);
  return std::string(header.data(), header.size()) + body;
}

std::string PackedWrites() {
  std::string body;
  kv::WireWriter w(&body);
  w.U32(2);
  w.U32(1);
  w.U64(0);
  w.U64(4);
  w.U32(1);
  w.U64(4096);
  w.U64(3);
  body += "abcdxyz";
  return body;
}

bool WriteFrames(const std::string& dir) {
  kv::HelloBody hello{std::string(kv::kNonceSize, 'n'), "decode-0", Compat()};
  kv::ChallengeBody challenge{std::string(kv::kNonceSize, 's'), std::string(kv::kProofSize, 'p'),
                              "prefill-0"};
  std::string compat;
  kv::EncodeCompat(Compat(), &compat);
  const std::string packed = PackedWrites();
  bool ok = true;
  ok &= Write(dir + "/hello", Frame(kv::FrameType::kHello, kv::EncodeHello(hello), 0));
  ok &= Write(dir + "/challenge", Frame(kv::FrameType::kChallenge, kv::EncodeChallenge(challenge)));
  ok &= Write(dir + "/auth", Frame(kv::FrameType::kAuth, std::string(kv::kProofSize, 'q')));
  ok &= Write(dir + "/welcome", Frame(kv::FrameType::kWelcome, ""));
  ok &= Write(dir + "/reject", Frame(kv::FrameType::kReject, "incompatible peer: dtype"));
  ok &= Write(dir + "/write", Frame(kv::FrameType::kWrite, std::string(64, '\x5a')));
  ok &= Write(dir + "/write_multi", Frame(kv::FrameType::kWriteMulti, packed));
  ok &= Write(dir + "/notify", Frame(kv::FrameType::kNotify, "room 42 done"));
  ok &= Write(dir + "/bye", Frame(kv::FrameType::kBye, ""));
  ok &= Write(dir + "/packed_writes", packed);
  ok &= Write(dir + "/compat", compat);
  ok &= Write(dir + "/descriptor_tcp", kv::EncodeDescriptor(Descriptor("tcp")));
  ok &= Write(dir + "/descriptor_rdma", kv::EncodeDescriptor(Descriptor("rdma")));
  return ok;
}

proto::KvLayout Layout() {
  const kv::CompatibilityRecord c = Compat();
  proto::KvLayout l;
  l.set_model_id(c.model_id);
  l.set_num_layers(static_cast<int32_t>(c.layer_count));
  l.set_num_kv_heads(static_cast<int32_t>(c.kv_heads));
  l.set_head_dim(static_cast<int32_t>(c.head_dim));
  l.set_dtype(c.dtype);
  l.set_block_size(static_cast<int32_t>(c.block_size));
  l.set_layout(c.layout);
  return l;
}

// Writes `m` twice: sealed as on the wire (mode byte 0) and as a payload to seal (mode byte 1).
bool WriteControl(const std::string& dir, const std::string& name, proto::ControlMessage m) {
  const std::string sealed = tandem::worker::SealControl(kSecret, std::move(m));
  return Write(dir + "/" + name + "_sealed", std::string(1, '\0') + sealed) &&
         Write(dir + "/" + name + "_payload",
               std::string(1, '\1') + sealed.substr(tandem::worker::kControlMacBytes));
}

bool WriteControls(const std::string& dir) {
  bool ok = true;
  {
    proto::ControlMessage m;
    proto::RegisterPeer* r = m.mutable_register_peer();
    r->set_decode_worker_id("127.0.0.1:8001");
    *r->mutable_layout() = Layout();
    r->set_transfer_descriptor(kv::EncodeDescriptor(Descriptor("tcp")));
    r->set_incarnation(0x1c0ffee5eedULL);
    ok &= WriteControl(dir, "register_peer", m);
  }
  {
    proto::ControlMessage m;
    proto::RegisterPeerReply* r = m.mutable_register_peer_reply();
    r->set_accepted(false);
    r->set_error("incompatible peer: layer_count: local 4, peer 28");
    *r->mutable_layout() = Layout();
    r->set_prefill_worker_id("127.0.0.1:8000");
    ok &= WriteControl(dir, "register_peer_reply", m);
  }
  {
    proto::ControlMessage m;
    proto::RoomRegistration* r = m.mutable_room_registration();
    r->set_bootstrap_room(0x5eed5eed5eedULL);
    r->set_decode_worker_id("127.0.0.1:8001");
    for (int b : {7, 8, 9, 3}) r->add_dst_block_ids(b);
    r->set_num_tokens(57);
    r->set_budget_ms(9000);
    ok &= WriteControl(dir, "room_registration", m);
  }
  {
    proto::ControlMessage m;
    proto::CompletionNotice* c = m.mutable_completion_notice();
    c->set_bootstrap_room(0x5eed5eed5eedULL);
    c->set_ok(true);
    c->set_first_token_id(1234);
    c->set_first_token_logprob(-0.25f);
    c->set_cached_tokens(16);
    c->set_prefill_compute_s(0.012);
    c->set_transfer_s(0.003);
    ok &= WriteControl(dir, "completion_ok", m);
  }
  {
    proto::ControlMessage m;
    proto::CompletionNotice* c = m.mutable_completion_notice();
    c->set_bootstrap_room(9);
    c->set_ok(false);
    c->set_error("prefill worker 127.0.0.1:8000: deadline exceeded");
    ok &= WriteControl(dir, "completion_error", m);
  }
  {
    proto::ControlMessage m;
    m.mutable_room_abort()->set_bootstrap_room(9);
    m.mutable_room_abort()->set_reason("the client went away");
    ok &= WriteControl(dir, "room_abort", m);
  }
  {
    proto::ControlMessage m;
    m.mutable_register_again()->set_bootstrap_room(0x5eed5eed5eedULL);
    m.mutable_register_again()->set_reason(
        "prefill worker 127.0.0.1:8000: unknown decode worker (it never registered with this "
        "process)");
    ok &= WriteControl(dir, "register_again", m);
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds <repo root>\n");
    return 2;
  }
  const std::string root = argv[1];
  const bool ok = WriteFrames(root + "/kvtransfer/fuzz/corpus") &&
                  WriteControls(root + "/worker/handoff/fuzz/corpus");
  return ok ? 0 : 1;
}
