// pd_handoff_bench: where a disaggregated request's time to first token goes, for one long prompt.
//
//   pd_handoff_bench --model-path /tmp/qwen05 --prompt-len 2048 --threads 2
//
// A prefill and a decode engine in this process, joined by the real KV handoff over the tcp
// transfer backend on loopback (worker/handoff/). The same prompt is run colocated first (the
// baseline TTFT), then disaggregated. Reported: the prefill worker's compute time, the transfer's
// tail (from the end of prefill compute until the decode worker has the first token: the part of
// the transfer that does not overlap compute, since layers ship as they are computed), the
// disaggregated TTFT, and the tail's share of it.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <random>

#include "CLI/CLI.hpp"
#include "engine/engine.h"
#include "nlohmann/json.hpp"
#include "worker/handoff/decode_handoff.h"
#include "worker/handoff/prefill_handoff.h"

namespace tandem::worker {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model_path;
  int prompt_len = 2048;
  int threads = 2;
  int repeats = 2;
  std::string kv_cache_memory = "1GiB";
  std::string json_path;
};

std::unique_ptr<engine::Engine> MakeEngine(const Options& o) {
  engine::ServingOptions so;
  so.model_path = o.model_path;
  so.threads = o.threads;
  so.kv_cache_memory = o.kv_cache_memory;
  so.disable_radix_cache = true;  // every repeat computes the whole prompt
  so.chunked_prefill_size = 512;
  so.max_prefill_tokens = 2048;
  auto e = engine::Engine::Create(so);
  if (!e.ok()) {
    std::fprintf(stderr, "pd_handoff_bench: %s\n", std::string(e.status().message()).c_str());
    std::exit(2);
  }
  return std::move(*e);
}

// Seconds from submit to the first token on `engine` (colocated).
double ColocatedTtft(engine::Engine* e, const std::vector<int32_t>& prompt) {
  std::promise<void> first;
  bool seen = false;
  engine::Request r;
  r.rid = "colocated";
  r.input_ids = prompt;
  r.sampling.temperature = 0;
  r.sampling.max_new_tokens = 1;
  r.callbacks.on_output = [&](const engine::RequestOutput& out) {
    if (!seen && !out.token_ids.empty()) {
      seen = true;
      first.set_value();
    }
  };
  const Clock::time_point t0 = Clock::now();
  if (!e->Submit(std::move(r)).ok()) std::exit(1);
  first.get_future().wait();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  e->WaitIdle(600);
  return s;
}

int Run(const Options& o) {
  auto pe = MakeEngine(o);
  auto de = MakeEngine(o);
  const std::string secret = "pd-handoff-bench-secret-0123456789";
  HandoffOptions ph;
  ph.worker_id = "prefill-bench";
  ph.served_model_name = "bench";
  ph.bootstrap_port = 0;
  ph.transfer.transfer_timeout_s = 600;
  ph.cluster_secret = secret;
  HandoffOptions dh = ph;
  dh.worker_id = "decode-bench";
  auto prefill = PrefillHandoff::Create(pe.get(), ph);
  auto decode = DecodeHandoff::Create(de.get(), dh);
  if (!prefill.ok() || !decode.ok()) {
    std::fprintf(
        stderr, "pd_handoff_bench: %s\n",
        std::string((prefill.ok() ? decode.status() : prefill.status()).message()).c_str());
    return 1;
  }
  std::mt19937 rng(5);
  const int32_t vocab = static_cast<int32_t>(
      std::min<int64_t>(pe->model_config().vocab_size, pe->tokenizer().vocab_size()));
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::vector<int32_t> prompt(static_cast<size_t>(o.prompt_len));
  for (auto& t : prompt) t = tok(rng);

  (void)ColocatedTtft(pe.get(), std::vector<int32_t>(prompt.begin(), prompt.begin() + 16));
  double colocated = 0, ttft = 0, compute = 0, tail = 0, transfer = 0;
  for (int rep = 0; rep < o.repeats; ++rep) {
    colocated += ColocatedTtft(pe.get(), prompt);

    const uint64_t room = 100 + static_cast<uint64_t>(rep);
    std::promise<Clock::time_point> first;
    bool seen = false;
    engine::Request r;
    r.rid = "pd" + std::to_string(rep);
    r.input_ids = prompt;
    r.sampling.temperature = 0;
    r.sampling.max_new_tokens = 2;
    r.callbacks.on_output = [&](const engine::RequestOutput& out) {
      if (!seen && !out.token_ids.empty()) {
        seen = true;
        first.set_value(Clock::now());
      }
    };
    proto::DecodeRequest leg;
    leg.set_bootstrap_room(room);
    leg.set_bootstrap_host("127.0.0.1");
    leg.set_bootstrap_port((*prefill)->bootstrap_port());
    const Clock::time_point t0 = Clock::now();
    if (absl::Status s = (*decode)->PrepareDecodeLeg(leg, &r); !s.ok()) {
      std::fprintf(stderr, "decode leg: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    if (!de->Submit(std::move(r)).ok()) return 1;
    proto::PrefillRequest pr;
    pr.set_bootstrap_room(room);
    pr.mutable_input_ids()->Assign(prompt.begin(), prompt.end());
    pr.mutable_sampling_params()->set_temperature(0);
    pr.mutable_sampling_params()->set_max_new_tokens(2);
    std::promise<absl::StatusOr<proto::PrefillResponse>> presp;
    (*prefill)->RunPrefill(
        pr, [&](absl::StatusOr<proto::PrefillResponse> resp) { presp.set_value(std::move(resp)); });
    const Clock::time_point t_first = first.get_future().get();
    absl::StatusOr<proto::PrefillResponse> resp = presp.get_future().get();
    if (!resp.ok()) {
      std::fprintf(stderr, "prefill leg: %s\n", std::string(resp.status().message()).c_str());
      return 1;
    }
    de->WaitIdle(600);
    const double t = std::chrono::duration<double>(t_first - t0).count();
    ttft += t;
    // The engine's prefill phase covers admission to first token; the tail is what TTFT adds.
    compute += resp->timings().prefill_compute_s();
    transfer += resp->timings().transfer_s();
    tail += t - resp->timings().queue_s() - resp->timings().prefill_compute_s();
  }
  const double n = o.repeats;
  colocated /= n;
  ttft /= n;
  compute /= n;
  tail /= n;
  transfer /= n;
  std::printf("prompt %d tokens, %d threads, tcp transfer backend on loopback, mean of %d\n",
              o.prompt_len, o.threads, o.repeats);
  std::printf("  colocated TTFT                 %8.3f s\n", colocated);
  std::printf("  disaggregated TTFT             %8.3f s  (%.3fx colocated)\n", ttft,
              ttft / colocated);
  std::printf("  prefill compute                %8.3f s\n", compute);
  std::printf("  transfer, first write->notice  %8.3f s  (overlaps compute)\n", transfer);
  std::printf("  tail after compute             %8.3f s  (%.2f%% of TTFT)\n", tail,
              100.0 * tail / ttft);
  if (!o.json_path.empty()) {
    nlohmann::json j;
    j["prompt_len"] = o.prompt_len;
    j["colocated_ttft_s"] = colocated;
    j["pd_ttft_s"] = ttft;
    j["prefill_compute_s"] = compute;
    j["transfer_s"] = transfer;
    j["transfer_tail_s"] = tail;
    j["transfer_share_of_ttft"] = tail / ttft;
    std::ofstream(o.json_path) << j.dump(2) << "\n";
  }
  (*prefill)->Shutdown();
  (*decode)->Shutdown();
  return 0;
}

}  // namespace
}  // namespace tandem::worker

int main(int argc, char** argv) {
  tandem::worker::Options o;
  CLI::App app{"TTFT breakdown of the prefill/decode KV handoff for one long prompt"};
  app.add_option("--model-path", o.model_path, "Hugging Face model directory")->required();
  app.add_option("--prompt-len", o.prompt_len, "prompt tokens")->check(CLI::Range(1, 1 << 20));
  app.add_option("--threads", o.threads, "compute threads per engine")->check(CLI::Range(1, 256));
  app.add_option("--repeats", o.repeats, "runs averaged")->check(CLI::Range(1, 100));
  app.add_option("--kv-cache-memory", o.kv_cache_memory, "KV cache per engine");
  app.add_option("--json", o.json_path, "write the figures to this JSON file");
  CLI11_PARSE(app, argc, argv);
  return tandem::worker::Run(o);
}
