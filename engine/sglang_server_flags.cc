#include "engine/sglang_server_flags.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tandem::engine {
namespace {

constexpr char kOneProcess[] =
    "a Tandem worker is one process on one host; scale out by starting more workers and giving "
    "them to tandem-router";

// A validator accepting only `allowed` values; any other is refused with "'VALUE': <why>".
CLI::Validator Only(std::vector<std::string> allowed, std::string why) {
  return CLI::Validator(
      [allowed, why](std::string& value) -> std::string {
        for (const std::string& a : allowed) {
          if (value == a) return "";
        }
        return absl::StrCat("'", value, "': ", why);
      },
      "", "tandem-only");
}

// Same concept, one possible value: the value that describes a Tandem worker.
void RegisterFixed(Flags& flags) {
  flags.AddIgnored<int>("--tp-size,--tp", "tensor parallelism 1: a worker is one process")
      ->check(Only({"1"}, absl::StrCat("Tandem has no tensor parallelism: ", kOneProcess)));
  flags.AddIgnored<int>("--dp-size,--dp", "data parallelism 1: a worker is one process")
      ->check(Only({"1"}, absl::StrCat("Tandem has no data parallelism inside a worker: ",
                                       kOneProcess, " (its --policy balances them)")));
  flags.AddIgnored<int>("--pp-size", "pipeline parallelism 1: a worker is one process")
      ->check(Only({"1"}, absl::StrCat("Tandem has no pipeline parallelism: ", kOneProcess)));
  flags.AddIgnored<int>("--ep-size,--ep", "expert parallelism 1: every expert is local")
      ->check(Only({"1"}, absl::StrCat("Tandem has no expert parallelism: ", kOneProcess)));
  flags.AddIgnored<int>("--moe-dense-tp-size,--moe-dense-tp", "dense layers run unsplit")
      ->check(Only({"1"}, "Tandem runs the dense layers unsplit (tensor parallelism 1)"));
  flags.AddIgnored<int>("--nnodes", "one node per worker")
      ->check(Only({"1"}, absl::StrCat("a worker spanning nodes is not supported: ", kOneProcess)));
  flags.AddIgnored<int>("--node-rank", "one node per worker")
      ->check(Only({"0"}, absl::StrCat("a worker spanning nodes is not supported (--nnodes 1 has "
                                       "only rank 0): ",
                                       kOneProcess)));
  flags.AddIgnored("--dist-init-addr", "ignored: a one-node worker has no peers to rendezvous");
  flags.AddIgnored("--device", "Tandem runs on the CPU")
      ->check(Only({"cpu"}, "Tandem runs on the CPU only (--device cpu)"));
  flags
      .AddIgnored("--dtype",
                  "weights are bf16 (fp16 and fp32 checkpoints are rounded to bf16 at load), "
                  "norms and accumulation fp32")
      ->check(Only({"auto", "bfloat16", "bf16"},
                   "Tandem computes with bf16 weights (fp16 and fp32 checkpoints are rounded to "
                   "bf16 at load): use --dtype auto or bfloat16"));
  flags.AddIgnored("--kv-cache-dtype", "the KV cache is bf16")
      ->check(Only({"auto", "bfloat16", "bf16"},
                   "the KV cache is bf16: use --kv-cache-dtype auto or bfloat16"));
  flags.AddIgnored("--load-format", "weights are read from *.safetensors")
      ->check(Only({"auto", "safetensors"},
                   "Tandem loads *.safetensors only: use --load-format auto or safetensors"));
}

// Tuning of GPU/NPU deployments (or of data-parallel ranks inside one server) that changes no
// result on a CPU worker.
void RegisterIgnored(Flags& flags) {
  flags.AddIgnoredSwitch("--trust-remote-code",
                         "ignored: Tandem runs no code from the checkpoint (its architectures "
                         "are built in)");
  flags.AddIgnored("--attention-backend",
                   "ignored: GPU/NPU kernel choice; Tandem runs its own CPU paged attention");
  flags.AddIgnored("--sampling-backend", "ignored: GPU kernel choice; Tandem samples on the CPU");
  flags.AddIgnored<int>("--cuda-graph-bs", "ignored: CUDA graphs are a GPU launch optimisation",
                        /*many=*/true);
  flags.AddIgnored<int>("--cuda-graph-max-bs",
                        "ignored: CUDA graphs are a GPU launch optimisation");
  flags.AddIgnoredSwitch("--disable-cuda-graph",
                         "ignored: CUDA graphs are a GPU launch optimisation");
  flags.AddIgnoredSwitch("--disable-cuda-graph-padding",
                         "ignored: CUDA graphs are a GPU launch optimisation");
  flags.AddIgnoredSwitch("--enable-torch-compile", "ignored: Tandem runs no PyTorch");
  flags.AddIgnored<int>("--torch-compile-max-bs", "ignored: Tandem runs no PyTorch");
  flags.AddIgnored<int>("--base-gpu-id", "ignored: no GPU is used");
  flags.AddIgnored<int>("--gpu-id-step", "ignored: no GPU is used");
  flags.AddIgnored<double>("--watchdog-timeout",
                           "ignored: SGLang's hang detector for GPU forward passes; Tandem's "
                           "router fails stalled legs (--stall-timeout-secs)");
  flags.AddIgnored<int>("--tokenizer-worker-num",
                        "ignored: the router tokenizes; a worker receives token ids");
  flags.AddIgnoredSwitch("--enable-dp-lm-head",
                         "ignored: data-parallel lm_head applies only with DP attention");
  flags.AddIgnoredSwitch("--enable-attn-tp-input-scattered",
                         "ignored: applies only with tensor parallelism");
  flags.AddIgnored("--moe-a2a-backend",
                   "ignored: expert all-to-all runs between GPUs; every expert is local here");
  flags.AddIgnored("--deepep-mode",
                   "ignored: DeepEP is a GPU all-to-all; every expert is local here");
  flags.AddIgnored("--ep-dispatch-algorithm",
                   "ignored: expert placement applies only with expert parallelism");
  flags.AddIgnored("--init-expert-location",
                   "ignored: expert placement applies only with expert parallelism");
  flags.AddIgnoredSwitch("--disable-shared-experts-fusion",
                         "ignored: a GPU kernel fusion; results do not depend on it");
  flags.AddIgnoredSwitch("--disable-chunked-prefix-cache", "ignored: a GPU MLA attention option");
  flags.AddIgnored("--load-balance-method",
                   "ignored: balances data-parallel ranks inside one SGLang server; a Tandem "
                   "worker is one rank");
  flags.AddIgnoredSwitch("--prefill-round-robin-balance",
                         "ignored: pairs data-parallel ranks inside one SGLang server; a Tandem "
                         "worker is one rank");
  flags.AddIgnored<int>("--decode-log-interval",
                        "ignored: throughput is on /metrics (tandem_* counters)");
  flags.AddIgnoredSwitch("--enable-metrics", "ignored: /metrics is always served (--http-port)");
  flags.AddIgnoredSwitch("--skip-server-warmup",
                         "ignored: a worker sends itself no warm-up request");
}

// Features Tandem does not have.
void RegisterRefused(Flags& flags) {
  const std::string speculative = "Tandem has no speculative decoding";
  for (const char* flag :
       {"--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
        "--speculative-eagle-topk", "--speculative-num-draft-tokens",
        "--speculative-draft-model-quantization"}) {
    flags.AddRefused(flag, /*takes_value=*/true, speculative);
  }
  flags.AddRefused("--enable-dp-attention", /*takes_value=*/false,
                   "Tandem has no data-parallel attention (a worker is one process)");
  flags.AddRefused("--enable-nsa-prefill-context-parallel", /*takes_value=*/false,
                   "Tandem has no context parallelism");
  flags.AddRefused("--enable-eplb", /*takes_value=*/false,
                   "Tandem has no expert parallelism to rebalance");
  flags.AddRefused("--enable-lora", /*takes_value=*/false, "Tandem serves no LoRA adapters");
  flags.AddRefused("--lora-paths", /*takes_value=*/true, "Tandem serves no LoRA adapters");
}

}  // namespace

void RegisterSglangServerFlags(Flags& flags) {
  RegisterFixed(flags);
  RegisterIgnored(flags);
  RegisterRefused(flags);
}

}  // namespace tandem::engine
