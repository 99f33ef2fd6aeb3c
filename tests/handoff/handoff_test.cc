// The KV handoff between a prefill and a decode worker, in one process over the real tcp transfer
// backend on loopback: tokens equal to the colocated engine's, and the failures a cluster meets
// (wrong secret, other model, a room nobody prefills, a prefill nobody registers, aborts) end
// with a clear error and every block back in the pool; either side restarted, the pair serves
// again.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "gtest/gtest.h"
#include "worker/handoff/decode_handoff.h"
#include "worker/handoff/prefill_handoff.h"

namespace tandem::worker {
namespace {

const char kSecret[] = "handoff-test-secret-0123456789";

std::string ModelDir() {
  return (std::filesystem::path(TANDEM_SOURCE_DIR) / "models/tandem-tiny-english").string();
}

// The tiny Qwen3-MoE test checkpoint (tests/engine/models).
std::string MoeModelDir() {
  return (std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/engine/models/qwen3-moe-tiny").string();
}

// quantization: the --quantization value ("" for bf16, "w8a8" for int8).
std::unique_ptr<engine::Engine> NewEngine(const std::string& quantization = "",
                                          const std::string& model_dir = ModelDir()) {
  engine::ServingOptions o;
  o.model_path = model_dir;
  o.quantization = quantization;
  o.kv_cache_memory = "16MiB";
  o.threads = 1;
  o.chunked_prefill_size = 64;
  o.max_prefill_tokens = 128;
  auto e = engine::Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

HandoffOptions Options(const std::string& id, const std::string& secret = kSecret,
                       const std::string& model = "tandem-tiny-english") {
  HandoffOptions h;
  h.worker_id = id;
  h.served_model_name = model;
  h.bootstrap_port = 0;
  h.transfer.backend = "tcp";
  h.transfer.lanes = 2;
  h.transfer.bootstrap_timeout_s = 2;
  h.transfer.transfer_timeout_s = 5;
  h.cluster_secret = secret;
  return h;
}

struct Result {
  std::vector<int32_t> tokens;
  std::optional<engine::FinishReason> finish;
  bool last = false;
};

struct Sink {
  std::mutex mu;
  std::map<std::string, Result> out;
  engine::RequestCallbacks Callbacks(const std::string& rid) {
    engine::RequestCallbacks cb;
    cb.on_output = [this, rid](const engine::RequestOutput& o) {
      std::lock_guard<std::mutex> lock(mu);
      Result& r = out[rid];
      r.tokens.insert(r.tokens.end(), o.token_ids.begin(), o.token_ids.end());
      if (o.finish) r.finish = o.finish;
      r.last = o.last;
    };
    return cb;
  }
};

struct Case {
  std::vector<int32_t> prompt;
  int max_new;
  float temperature;
  uint64_t seed;
};

std::vector<Case> Cases(int n) {
  std::mt19937 rng(17);
  std::uniform_int_distribution<int32_t> tok(0, 2999);
  std::vector<int32_t> shared(70);
  for (auto& t : shared) t = tok(rng);
  std::vector<Case> cases;
  for (int i = 0; i < n; ++i) {
    Case c;
    const int len = 1 + (37 * i) % 200;  // some longer than the 64-token chunk
    if (i % 3 == 0) c.prompt = shared;   // shared prefixes hit the prefill side's radix cache
    for (int k = 0; k < len; ++k) c.prompt.push_back(tok(rng));
    c.max_new = 4 + i % 9;
    c.temperature = i % 4 == 1 ? 0.9f : 0.0f;
    c.seed = 500 + static_cast<uint64_t>(i);
    cases.push_back(std::move(c));
  }
  return cases;
}

proto::SamplingParams ToProto(const Case& c) {
  proto::SamplingParams p;
  p.set_temperature(c.temperature);
  p.set_max_new_tokens(c.max_new);
  p.set_seed(c.seed);
  p.set_ignore_eos(true);
  return p;
}

engine::Request DecodeRequest(const std::string& rid, const Case& c, Sink* sink) {
  engine::Request r;
  r.rid = rid;
  r.input_ids = c.prompt;
  r.sampling.temperature = c.temperature;
  r.sampling.max_new_tokens = c.max_new;
  r.sampling.seed = c.seed;
  r.sampling.ignore_eos = true;
  r.callbacks = sink->Callbacks(rid);
  return r;
}

void ExpectAllBlocksFree(engine::Engine* e) {
  ASSERT_TRUE(e->WaitIdle(30));
  for (int i = 0; i < 200 && e->FlushCache().code() == absl::StatusCode::kFailedPrecondition; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(e->FlushCache().ok());
  for (int i = 0; i < 200 && e->Load().free_blocks != e->Load().total_blocks; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(e->Load().free_blocks, e->Load().total_blocks);
}

struct Pair {
  std::unique_ptr<engine::Engine> pe, de;
  std::unique_ptr<PrefillHandoff> ph;
  std::unique_ptr<DecodeHandoff> dh;
};

Pair MakePair(const HandoffOptions& decode_options = Options("decode-0"),
              const std::string& quantization = "", const std::string& model_dir = ModelDir()) {
  Pair p;
  p.pe = NewEngine(quantization, model_dir);
  p.de = NewEngine(quantization, model_dir);
  auto ph = PrefillHandoff::Create(p.pe.get(), Options("prefill-0"));
  EXPECT_TRUE(ph.ok()) << ph.status();
  p.ph = std::move(*ph);
  auto dh = DecodeHandoff::Create(p.de.get(), decode_options);
  EXPECT_TRUE(dh.ok()) << dh.status();
  p.dh = std::move(*dh);
  return p;
}

proto::DecodeRequest Leg(uint64_t room, int bootstrap_port) {
  proto::DecodeRequest leg;
  leg.set_bootstrap_room(room);
  leg.set_bootstrap_host("127.0.0.1");
  leg.set_bootstrap_port(bootstrap_port);
  return leg;
}

// What a decode worker takes from a prefill worker's completion notice: the first token and its
// alternatives, the prefill side's error as sent, and a notice whose alternatives' ids and
// logprobs differ in count refused with the room named (the leg is then aborted with it).
TEST(CompletionNoticeTest, FirstTokenAlternativesAndErrors) {
  proto::CompletionNotice notice;
  notice.set_bootstrap_room(77);
  notice.set_ok(true);
  notice.set_first_token_id(42);
  notice.set_first_token_logprob(-0.25f);
  notice.add_first_token_top_ids(42);
  notice.add_first_token_top_logprobs(-0.25f);
  notice.add_first_token_top_ids(7);
  notice.add_first_token_top_logprobs(-1.5f);
  absl::StatusOr<engine::SampleResult> first = FirstTokenOfNotice(notice);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->token, 42);
  EXPECT_EQ(first->logprob, -0.25f);
  ASSERT_EQ(first->top.size(), 2u);
  EXPECT_EQ(first->top[1].token, 7);
  EXPECT_EQ(first->top[1].logprob, -1.5f);

  notice.add_first_token_top_ids(9);  // three ids, two logprobs
  first = FirstTokenOfNotice(notice);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(first.status().message(),
            "the prefill worker's completion notice for room 77 has 3 top-logprob ids but 2 "
            "logprobs");

  proto::CompletionNotice failed;
  failed.set_bootstrap_room(78);
  failed.set_ok(false);
  failed.set_error("prefill failed: the KV transfer to 10.0.0.2 broke");
  first = FirstTokenOfNotice(failed);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().message(), "prefill failed: the KV transfer to 10.0.0.2 broke");
}

// Prefill on one engine, KV over TCP, decode on another: the same tokens as one engine alone, with
// the engines' linear layers in `quantization` ("" bf16, "w8a8" int8), serving `model_dir`.
void ExpectDisaggregatedTokensEqualColocated(const std::string& quantization,
                                             const std::string& model_dir = ModelDir()) {
  const std::vector<Case> cases = Cases(24);
  Pair p = MakePair(Options("decode-0"), quantization, model_dir);
  Sink dsink;
  std::mutex pmu;
  std::map<uint64_t, absl::StatusOr<proto::PrefillResponse>> presp;
  for (size_t i = 0; i < cases.size(); ++i) {
    const uint64_t room = 1000 + i;
    const std::string rid = "r" + std::to_string(i);
    engine::Request r = DecodeRequest(rid, cases[i], &dsink);
    ASSERT_TRUE(p.dh->PrepareDecodeLeg(Leg(room, p.ph->bootstrap_port()), &r).ok());
    ASSERT_TRUE(p.de->Submit(std::move(r)).ok());
    proto::PrefillRequest pr;
    pr.set_bootstrap_room(room);
    pr.set_rid(rid);
    pr.mutable_input_ids()->Assign(cases[i].prompt.begin(), cases[i].prompt.end());
    *pr.mutable_sampling_params() = ToProto(cases[i]);
    p.ph->RunPrefill(pr, [&pmu, &presp, room](absl::StatusOr<proto::PrefillResponse> resp) {
      std::lock_guard<std::mutex> lock(pmu);
      presp.emplace(room, std::move(resp));
    });
  }
  ASSERT_TRUE(p.de->WaitIdle(120));
  // Colocated reference.
  auto colocated = NewEngine(quantization, model_dir);
  Sink csink;
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(colocated->Submit(DecodeRequest("c" + std::to_string(i), cases[i], &csink)).ok());
  }
  ASSERT_TRUE(colocated->WaitIdle(120));
  for (size_t i = 0; i < cases.size(); ++i) {
    const Result& d = dsink.out["r" + std::to_string(i)];
    ASSERT_TRUE(d.last) << i;
    ASSERT_TRUE(d.finish.has_value());
    EXPECT_EQ(d.finish->kind, engine::FinishReason::Kind::kLength) << d.finish->message;
    EXPECT_EQ(d.tokens, csink.out["c" + std::to_string(i)].tokens) << "request " << i;
  }
  for (int i = 0; i < 500 && p.ph->inflight() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::lock_guard<std::mutex> lock(pmu);
  ASSERT_EQ(presp.size(), cases.size());
  int with_cache = 0;
  for (auto& [room, resp] : presp) {
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_EQ(resp->first_token_id(), dsink.out["r" + std::to_string(room - 1000)].tokens[0]);
    with_cache += resp->cached_tokens() > 0;
  }
  EXPECT_GT(with_cache, 0) << "shared prefixes should hit the prefill worker's radix cache";
  ExpectAllBlocksFree(p.pe.get());
  ExpectAllBlocksFree(p.de.get());
}

TEST(HandoffTest, DisaggregatedTokensEqualColocatedTokens) {
  ExpectDisaggregatedTokensEqualColocated("");
}

TEST(HandoffTest, DisaggregatedTokensEqualColocatedTokensInt8) {
  ExpectDisaggregatedTokensEqualColocated("w8a8");
}

// Qwen3-MoE: the prefill and decode workers batch a request with different others, so its
// routing and expert matmuls must not depend on them (engine/moe.h).
TEST(HandoffTest, DisaggregatedTokensEqualColocatedTokensMoe) {
  ExpectDisaggregatedTokensEqualColocated("", MoeModelDir());
}

TEST(HandoffTest, DisaggregatedTokensEqualColocatedTokensMoeInt8) {
  ExpectDisaggregatedTokensEqualColocated("w8a8", MoeModelDir());
}

TEST(HandoffTest, WrongSecretAndOtherModelAreRefusedWithBothValues) {
  Pair good = MakePair();
  {
    auto de = NewEngine();
    auto dh = DecodeHandoff::Create(de.get(), Options("decode-x", "another-secret-0123456789"));
    ASSERT_TRUE(dh.ok());
    engine::Request r;
    r.rid = "x";
    r.input_ids = {1, 2, 3};
    absl::Status s = (*dh)->PrepareDecodeLeg(Leg(7, good.ph->bootstrap_port()), &r);
    EXPECT_TRUE(absl::IsUnauthenticated(s)) << s;
    EXPECT_NE(s.message().find("secret"), std::string::npos) << s;
  }
  {
    auto de = NewEngine();
    auto dh = DecodeHandoff::Create(de.get(), Options("decode-y", kSecret, "another-model"));
    ASSERT_TRUE(dh.ok());
    engine::Request r;
    r.rid = "y";
    r.input_ids = {1, 2, 3};
    absl::Status s = (*dh)->PrepareDecodeLeg(Leg(8, good.ph->bootstrap_port()), &r);
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_NE(s.message().find("another-model"), std::string::npos) << s;
    EXPECT_NE(s.message().find("tandem-tiny-english"), std::string::npos) << s;
  }
  {  // nothing listens there
    engine::Request r;
    r.rid = "z";
    r.input_ids = {1};
    HandoffOptions o = Options("decode-z");
    absl::Status s = good.dh->PrepareDecodeLeg(Leg(9, 1), &r);
    EXPECT_TRUE(absl::IsUnavailable(s)) << s;
    EXPECT_NE(s.message().find("127.0.0.1:1"), std::string::npos) << s;
  }
}

// Two Qwen3-MoE checkpoints of the same attention shape under the same served name, one routing
// with norm_topk_prob and one without: their KV would fit, their tokens would not agree, so the
// pair is refused.
TEST(HandoffTest, MoeCheckpointsWithOtherRoutingAreRefused) {
  const std::string other = ::testing::TempDir() + "/handoff-moe-no-norm";
  std::filesystem::remove_all(other);
  std::filesystem::create_directories(other);
  for (const char* f :
       {"model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    std::filesystem::copy_file(MoeModelDir() + "/" + f, other + "/" + f);
  }
  std::ifstream in(MoeModelDir() + "/config.json");
  std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string from = "\"norm_topk_prob\": true";
  ASSERT_NE(config.find(from), std::string::npos);
  config.replace(config.find(from), from.size(), "\"norm_topk_prob\": false");
  std::ofstream(other + "/config.json") << config;

  Pair good = MakePair(Options("decode-0"), "", MoeModelDir());
  auto de = NewEngine("", other);
  ASSERT_TRUE(de);
  auto dh = DecodeHandoff::Create(de.get(), Options("decode-moe"));
  ASSERT_TRUE(dh.ok());
  engine::Request r;
  r.rid = "moe";
  r.input_ids = {1, 2, 3};
  absl::Status s = (*dh)->PrepareDecodeLeg(Leg(10, good.ph->bootstrap_port()), &r);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
}

TEST(HandoffTest, RoomWhosePrefillNeverStartsFailsOnBothSidesAndFreesBlocks) {
  Pair p = MakePair();
  Sink dsink;
  Case c{{5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21}, 5, 0, 0};
  engine::Request r = DecodeRequest("orphan", c, &dsink);
  ASSERT_TRUE(p.dh->PrepareDecodeLeg(Leg(42, p.ph->bootstrap_port()), &r).ok());
  ASSERT_TRUE(p.de->Submit(std::move(r)).ok());
  ASSERT_TRUE(p.de->WaitIdle(20));  // bootstrap 2 s + transfer 5 s
  {
    std::lock_guard<std::mutex> lock(dsink.mu);
    const Result& d = dsink.out["orphan"];
    ASSERT_TRUE(d.last);
    EXPECT_EQ(d.finish->kind, engine::FinishReason::Kind::kAbort);
    EXPECT_NE(d.finish->message.find("no KV cache from prefill worker"), std::string::npos)
        << d.finish->message;
    EXPECT_TRUE(d.tokens.empty());
  }
  ExpectAllBlocksFree(p.de.get());

  // The other way round: a prefill leg whose decode worker never registers the room.
  absl::StatusOr<proto::PrefillResponse> got = absl::UnknownError("not called");
  std::atomic<bool> called{false};
  proto::PrefillRequest pr;
  pr.set_bootstrap_room(43);
  pr.mutable_input_ids()->Add(5);
  pr.mutable_sampling_params()->set_max_new_tokens(3);
  p.ph->RunPrefill(pr, [&](absl::StatusOr<proto::PrefillResponse> resp) {
    got = std::move(resp);
    called = true;
  });
  for (int i = 0; i < 1000 && !called; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(called);
  EXPECT_TRUE(absl::IsDeadlineExceeded(got.status())) << got.status();
  EXPECT_NE(got.status().message().find("--bootstrap-timeout"), std::string::npos);
  ExpectAllBlocksFree(p.pe.get());
}

TEST(HandoffTest, AbortOnThePrefillSideEndsTheDecodeLegWithItsReason) {
  Pair p = MakePair();
  Sink dsink;
  Case c;
  for (int i = 0; i < 300; ++i) c.prompt.push_back(i * 7 % 3000);  // several chunks
  c.max_new = 50;
  engine::Request r = DecodeRequest("victim", c, &dsink);
  ASSERT_TRUE(p.dh->PrepareDecodeLeg(Leg(77, p.ph->bootstrap_port()), &r).ok());
  ASSERT_TRUE(p.de->Submit(std::move(r)).ok());
  std::atomic<bool> called{false};
  absl::Status prefill_status;
  // Aborted before its prefill can start: the registration may or may not have arrived.
  proto::PrefillRequest pr;
  pr.set_bootstrap_room(77);
  pr.mutable_input_ids()->Assign(c.prompt.begin(), c.prompt.end());
  pr.mutable_sampling_params()->set_max_new_tokens(50);
  p.ph->RunPrefill(pr, [&](absl::StatusOr<proto::PrefillResponse> resp) {
    prefill_status = resp.status();
    called = true;
  });
  EXPECT_TRUE(p.ph->AbortRoom(77, "client went away"));
  for (int i = 0; i < 1000 && !called; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(called);
  EXPECT_TRUE(absl::IsAborted(prefill_status)) << prefill_status;
  ASSERT_TRUE(p.de->WaitIdle(20));
  {
    std::lock_guard<std::mutex> lock(dsink.mu);
    const Result& d = dsink.out["victim"];
    ASSERT_TRUE(d.last);
    EXPECT_EQ(d.finish->kind, engine::FinishReason::Kind::kAbort);
    // Either the prefill side's notice ("client went away") reached it, or the room timed out.
    EXPECT_TRUE(d.finish->message.find("client went away") != std::string::npos ||
                d.finish->message.find("no KV cache") != std::string::npos)
        << d.finish->message;
  }
  ExpectAllBlocksFree(p.pe.get());
  ExpectAllBlocksFree(p.de.get());
}

// One request through prefill handoff `ph` and decode handoff `dh`: the decode leg's result and
// the prefill leg's status.
struct LegOutcome {
  Result decode;
  absl::Status prefill = absl::UnknownError("not called");
};

LegOutcome RunOneLeg(PrefillHandoff* ph, engine::Engine* de, DecodeHandoff* dh, uint64_t room,
                     const Case& c) {
  Sink sink;
  LegOutcome out;
  const std::string rid = "leg" + std::to_string(room);
  engine::Request r = DecodeRequest(rid, c, &sink);
  absl::Status prepared = dh->PrepareDecodeLeg(Leg(room, ph->bootstrap_port()), &r);
  EXPECT_TRUE(prepared.ok()) << prepared;
  if (!prepared.ok()) return out;
  EXPECT_TRUE(de->Submit(std::move(r)).ok());
  std::atomic<bool> called{false};
  proto::PrefillRequest pr;
  pr.set_bootstrap_room(room);
  pr.set_rid(rid);
  pr.mutable_input_ids()->Assign(c.prompt.begin(), c.prompt.end());
  *pr.mutable_sampling_params() = ToProto(c);
  ph->RunPrefill(pr, [&](absl::StatusOr<proto::PrefillResponse> resp) {
    out.prefill = resp.status();
    called = true;
  });
  for (int i = 0; i < 2000 && !called; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(called);
  EXPECT_TRUE(de->WaitIdle(30));
  std::lock_guard<std::mutex> lock(sink.mu);
  out.decode = sink.out[rid];
  return out;
}

int FreeTcpPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A prefill worker restarted on the same bootstrap port does not know the decode worker: it
// answers the first room with RegisterAgain, the decode worker registers again on its open
// connection and resends the room, and that very request succeeds (no room is lost to the
// --bootstrap-timeout, 2 s here).
TEST(HandoffTest, PrefillRestartedOnTheSamePortServesTheNextRoom) {
  Pair p = MakePair();
  Case c{{11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, 6, 0, 0};
  LegOutcome first = RunOneLeg(p.ph.get(), p.de.get(), p.dh.get(), 501, c);
  ASSERT_TRUE(first.prefill.ok()) << first.prefill;
  ASSERT_TRUE(first.decode.last);
  ASSERT_EQ(first.decode.tokens.size(), 6u);

  const int port = p.ph->bootstrap_port();
  p.ph.reset();  // the prefill worker goes away...
  HandoffOptions o = Options("prefill-0");
  o.bootstrap_port = port;
  auto restarted = PrefillHandoff::Create(p.pe.get(), o);  // ...and comes back on the same port
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  p.ph = std::move(*restarted);
  for (uint64_t room = 502; room < 505; ++room) {
    LegOutcome again = RunOneLeg(p.ph.get(), p.de.get(), p.dh.get(), room, c);
    EXPECT_TRUE(again.prefill.ok()) << "room " << room << ": " << again.prefill;
    ASSERT_TRUE(again.decode.last) << room;
    EXPECT_EQ(again.decode.finish->kind, engine::FinishReason::Kind::kLength)
        << again.decode.finish->message;
    EXPECT_EQ(again.decode.tokens, first.decode.tokens) << "room " << room;
  }
  ExpectAllBlocksFree(p.pe.get());
  ExpectAllBlocksFree(p.de.get());
}

// A decode worker restarted with the same id and the same transfer endpoint exports the same
// descriptor; its new incarnation makes the prefill worker import it anew instead of keeping the
// connection to the process that is gone.
TEST(HandoffTest, DecodeRestartedWithTheSameDescriptorIsImportedAnew) {
  HandoffOptions d = Options("decode-0");
  d.transfer.transfer_port = FreeTcpPort();
  Pair p = MakePair(d);
  Case c{{21, 22, 23, 24, 25, 26, 27}, 5, 0, 0};
  LegOutcome first = RunOneLeg(p.ph.get(), p.de.get(), p.dh.get(), 601, c);
  ASSERT_TRUE(first.prefill.ok()) << first.prefill;
  ASSERT_TRUE(first.decode.last);

  p.dh.reset();
  auto restarted = DecodeHandoff::Create(p.de.get(), d);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  p.dh = std::move(*restarted);
  for (uint64_t room = 602; room < 605; ++room) {
    LegOutcome again = RunOneLeg(p.ph.get(), p.de.get(), p.dh.get(), room, c);
    EXPECT_TRUE(again.prefill.ok()) << "room " << room << ": " << again.prefill;
    ASSERT_TRUE(again.decode.last) << room;
    EXPECT_EQ(again.decode.tokens, first.decode.tokens) << "room " << room;
  }
  ExpectAllBlocksFree(p.pe.get());
  ExpectAllBlocksFree(p.de.get());
}

}  // namespace
}  // namespace tandem::worker
