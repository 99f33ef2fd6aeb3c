#!/usr/bin/env bash
# bench/pd_headline.sh in its smoke mode (shipped model, short lengths, 2 rates): both
# configurations run, every request succeeds, and the one JSON holds every run, the pd/colocated
# ratios per rate, goodput and the verdict. No speed is asserted (the host is shared).
#   tests/bench/pd_headline_smoke_test.sh BIN_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:?usage: pd_headline_smoke_test.sh BIN_DIR}
out=$(mktemp /tmp/pd_headline_smoke.XXXXXX.json)
trap 'rm -f "$out"' EXIT
SMOKE=1 RATES="4 8" NUM_PROMPTS=10 bench/pd_headline.sh --out "$out" "$bin" > /dev/null
python3 - "$out" <<'PY'
import json, math, sys
s = json.load(open(sys.argv[1]))
errors = []
for config in ("pd", "colocated"):
    runs = s["runs"].get(config, [])
    if [r["request_rate"] for r in runs] != [4.0, 8.0]:
        errors.append(f"{config}: rates {[r.get('request_rate') for r in runs]}")
    for r in runs:
        if r.get("run_failed") is not None or r["completed"] != 10 or r["failed"] != 0:
            errors.append(f"{config}@{r['request_rate']}: not every request succeeded: {r}")
            continue
        if r["dataset_name"] != "mixed" or r["mixed_long_input_len"] != 384:
            errors.append(f"{config}: not the mixed smoke workload")
        # 10 prompts, round(10 x 0.2) = 2 long ones of 384 tokens, 8 short of 16..32 tokens.
        if not 2 * 384 + 8 * 16 <= r["total_input_tokens"] <= 2 * 384 + 8 * 32:
            errors.append(f"{config}: {r['total_input_tokens']} input tokens")
        for key in ("goodput_request_throughput", "goodput_fraction", "max_itl_ms",
                    "p99_itl_ms", "median_ttft_ms", "p99_ttft_ms", "output_throughput"):
            if not (isinstance(r.get(key), (int, float)) and math.isfinite(r[key]) and r[key] >= 0):
                errors.append(f"{config}@{r['request_rate']}: bad {key}: {r.get(key)}")
        if not 0 <= r["goodput_fraction"] <= 1:
            errors.append(f"{config}: goodput fraction {r['goodput_fraction']}")
if [x["request_rate"] for x in s["ratios"]] != [4.0, 8.0]:
    errors.append(f"ratios: {s['ratios']}")
for x in s["ratios"]:
    if not (x["output_throughput"] and x["output_throughput"] > 0):
        errors.append(f"ratio of output throughput: {x}")
if "highest_rate_both_sustain" not in s["verdict"]:
    errors.append(f"verdict: {s['verdict']}")
if s["slo"] != {"ttft_ms": 2000, "itl_p99_ms": 200}:
    errors.append(f"slo: {s['slo']}")
if errors:
    print("\n".join(errors))
    sys.exit(1)
print("pd_headline smoke: ok")
PY
