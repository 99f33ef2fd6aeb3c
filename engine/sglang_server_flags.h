// The flags of SGLang's `launch_server` lines that tandem-prefill and tandem-decode accept beyond
// their own, so that an operator's SGLang line starts a worker where its meaning applies on a CPU
// host and is refused, naming the flag, where it asks for something Tandem does not do
// (docs/operations.md "SGLang launch flags"). Three kinds:
//   - the same concept: accepted with the one value that describes a Tandem worker
//     (--tp-size 1, --device cpu, --dtype bfloat16, ...) and refused with any other;
//   - GPU/NPU tuning that changes no result here (--cuda-graph-bs, --attention-backend, ...):
//     accepted, values checked, one start-up log line each (Flags::IgnoredNotes);
//   - features Tandem lacks (--speculative-algorithm, --enable-dp-attention, --lora-paths, ...):
//     refused by Flags::Parse with the reason.
// The flags Tandem maps onto its own options under SGLang's names (--model-path, --context-length,
// --quantization, --mem-fraction-static, --max-total-tokens, --random-seed, --disaggregation-*,
// ...) are registered where those options live (RegisterServingFlags, RegisterTransferFlags), not
// here.
#ifndef TANDEM_ENGINE_SGLANG_SERVER_FLAGS_H_
#define TANDEM_ENGINE_SGLANG_SERVER_FLAGS_H_

#include "common/flags.h"

namespace tandem::engine {

// Registers the flags above on `flags`. Called by RegisterServingFlags.
void RegisterSglangServerFlags(Flags& flags);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_SGLANG_SERVER_FLAGS_H_
