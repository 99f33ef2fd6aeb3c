#include "decode_node/decode_options.h"

#include "common/status.h"

namespace tandem::decode {

void RegisterDecodeFlags(Flags& flags, DecodeOptions* o) {
  worker::RegisterWorkerFlags(flags, "decode", o);
  flags.Add("--local-prefill", &o->local_prefill,
            "Prefill locally (colocated mode, no prefill workers or KV transfer)");
  flags.Add("--allow-local-prefill", &o->allow_local_prefill,
            "Disaggregated: also prefill requests the router sends without a prefill worker "
            "(conditional disaggregation); --allow-local-prefill=false refuses them");
}

absl::Status ValidateDecodeOptions(const DecodeOptions& o) {
  RETURN_IF_ERROR(worker::ValidateWorkerOptions(o, "decode"));
  if (!o.local_prefill) RETURN_IF_ERROR(kv::LoadClusterSecret(o.transfer).status());
  return absl::OkStatus();
}

}  // namespace tandem::decode
