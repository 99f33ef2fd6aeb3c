#!/usr/bin/env python3
"""Summary of bench/pd_headline.sh: one JSON, a Markdown table, the ratios and a plot.

Input: the tandem-bench --output-file records of the runs (one JSON object a line, tagged with
the configuration: pd, colocated, conditional; a run that failed as a whole is a line with
"run_failed"). Output JSON:
  {"host": {...}, "workload": {...}, "slo": {...},
   "runs": {"pd": [record by rate...], "colocated": [...], ("conditional": [...])},
   "ratios": [{"request_rate": r, "<metric>": pd / colocated, ...}],   # pd over colocated
   "sustained": {"pd": [rates], ...}, "verdict": {...}}
A configuration sustains a rate when every request of the run succeeded and the run's TTFT p99
is within the TTFT SLO (the queue did not grow without bound). The verdict checks the goal at the
highest rate both pd and colocated sustain: pd's ITL p99 <= 0.5 x colocated's at >= 0.9 x its
output token throughput.
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile

METRICS = [  # key, column title, format
    ("request_throughput", "req/s", "{:.3f}"),
    ("output_throughput", "out tok/s", "{:.1f}"),
    ("median_ttft_ms", "TTFT p50 ms", "{:.0f}"),
    ("p99_ttft_ms", "TTFT p99 ms", "{:.0f}"),
    ("median_itl_ms", "ITL p50 ms", "{:.0f}"),
    ("p99_itl_ms", "ITL p99 ms", "{:.0f}"),
    ("max_itl_ms", "ITL max ms", "{:.0f}"),
    ("goodput_request_throughput", "goodput req/s", "{:.3f}"),
    ("goodput_fraction", "good %", "{:.0%}"),
]
CONFIG_ORDER = ["pd", "colocated", "conditional"]


def load_runs(path):
    runs = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            record = json.loads(line)
            runs.setdefault(record["tag"], []).append(record)
    for records in runs.values():
        records.sort(key=lambda r: float(r["request_rate"]))
    return runs


def sustained(record, slo_ttft_ms):
    if record.get("run_failed") is not None:
        return False
    return record["failed"] == 0 and record["p99_ttft_ms"] <= slo_ttft_ms


def ratio(a, b):
    return a / b if b else None


def markdown_table(runs, ratios, slo_ttft_ms):
    head = ["rate req/s", "config", "done"] + [title for _, title, _ in METRICS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rates = sorted({float(r["request_rate"]) for rs in runs.values() for r in rs})
    for rate in rates:
        for config in [c for c in CONFIG_ORDER if c in runs]:
            record = next((r for r in runs[config] if float(r["request_rate"]) == rate), None)
            if record is None:
                continue
            if record.get("run_failed") is not None:
                cells = [f"{rate:g}", config, "run failed"] + ["-"] * len(METRICS)
            else:
                done = f"{record['completed']}/{record['completed'] + record['failed']}"
                if not sustained(record, slo_ttft_ms):
                    done += " (not sustained)"
                cells = [f"{rate:g}", config, done]
                cells += [fmt.format(record.get(key, 0)) for key, _, fmt in METRICS]
            lines.append("| " + " | ".join(cells) + " |")
        r = next((x for x in ratios if x["request_rate"] == rate), None)
        if r is not None:
            cells = [f"{rate:g}", "**pd / colocated**", ""]
            for key, _, _ in METRICS:
                cells.append("-" if r.get(key) is None else f"{r[key]:.2f}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(runs, png, text):
    """Four panels against the request rate; `text` adds a dumb-terminal ITL p99 plot."""
    gnuplot = shutil.which("gnuplot")
    if gnuplot is None:
        print("pd_headline: no gnuplot on PATH (Debian: gnuplot-nox); no plot", file=sys.stderr)
        return None
    configs = [c for c in CONFIG_ORDER if c in runs]
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for config in configs:
            files[config] = f"{tmp}/{config}.dat"
            with open(files[config], "w") as f:
                for r in runs[config]:
                    if r.get("run_failed") is not None:
                        continue
                    f.write(" ".join(str(v) for v in [
                        r["request_rate"], r["output_throughput"], r["p99_ttft_ms"],
                        r["p99_itl_ms"], r.get("goodput_request_throughput", 0)]) + "\n")

        def series(column):
            return ", ".join(f"'{files[c]}' using 1:{column} with linespoints title '{c}'"
                             for c in configs)

        script = []
        if png:
            script += [f"set terminal pngcairo size 1200,800 font ',10'", f"set output '{png}'",
                       "set multiplot layout 2,2 title 'PD (1 prefill + 1 decode) vs colocated "
                       "(2 workers), mixed workload'", "set key top left",
                       "set xlabel 'request rate (req/s)'", "set grid"]
            for column, title in [(2, "output tokens/s"), (3, "TTFT p99 (ms)"),
                                  (4, "ITL p99 (ms)"), (5, "goodput (req/s)")]:
                script += [f"set ylabel '{title}'", f"plot {series(column)}"]
            script += ["unset multiplot", "set output"]
        if text:
            script += ["set terminal dumb size 78,22", "set output", "set key top left",
                       "set xlabel 'request rate (req/s)'", "set ylabel 'ITL p99 ms'",
                       "unset grid", f"plot {series(4)}"]
        result = subprocess.run([gnuplot], input="\n".join(script) + "\n", text=True,
                                capture_output=True, timeout=60)
        if result.returncode != 0:
            print(f"pd_headline: gnuplot failed: {result.stderr}", file=sys.stderr)
            return None
        return result.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", required=True)
    p.add_argument("--out")
    p.add_argument("--plot")
    p.add_argument("--host-cpu", default="")
    p.add_argument("--cores", type=int, default=0)
    p.add_argument("--uptime-before", default="")
    p.add_argument("--uptime-after", default="")
    p.add_argument("--model", default="")
    p.add_argument("--threads-per-worker", type=int, default=0)
    args = p.parse_args()

    runs = load_runs(args.runs)
    any_record = next((r for rs in runs.values() for r in rs if "slo_ttft_ms" in r), {})
    slo = {"ttft_ms": any_record.get("slo_ttft_ms", 0),
           "itl_p99_ms": any_record.get("slo_itl_p99_ms", 0)}
    workload = {k[len("mixed_"):]: v for k, v in any_record.items() if k.startswith("mixed_")}
    workload["num_prompts_by_rate"] = {str(r["request_rate"]): r.get("num_prompts")
                                for r in runs.get("pd", [])}

    ratios = []
    by_rate = {c: {float(r["request_rate"]): r for r in runs.get(c, [])} for c in runs}
    for rate in sorted(by_rate.get("pd", {})):
        pd, colo = by_rate["pd"].get(rate), by_rate.get("colocated", {}).get(rate)
        if pd is None or colo is None or "run_failed" in pd or "run_failed" in colo:
            continue
        ratios.append({"request_rate": rate,
                       **{key: ratio(pd.get(key, 0), colo.get(key, 0)) for key, _, _ in METRICS}})

    sustained_rates = {c: [float(r["request_rate"]) for r in rs if sustained(r, slo["ttft_ms"])]
                       for c, rs in runs.items()}
    both = sorted(set(sustained_rates.get("pd", [])) & set(sustained_rates.get("colocated", [])))
    verdict = {"highest_rate_both_sustain": both[-1] if both else None}
    if both:
        r = next(x for x in ratios if x["request_rate"] == both[-1])
        verdict["itl_p99_ratio"] = r["p99_itl_ms"]
        verdict["output_throughput_ratio"] = r["output_throughput"]
        verdict["goal_met"] = (r["p99_itl_ms"] is not None and r["p99_itl_ms"] <= 0.5 and
                               r["output_throughput"] is not None and
                               r["output_throughput"] >= 0.9)

    summary = {
        "host": {"cpu": args.host_cpu, "cores": args.cores, "uptime_before": args.uptime_before,
                 "uptime_after": args.uptime_after},
        "model": args.model, "threads_per_worker": args.threads_per_worker,
        "workload": workload, "slo": slo, "runs": runs, "ratios": ratios,
        "sustained": sustained_rates, "verdict": verdict,
    }
    print()
    print(markdown_table(runs, ratios, slo["ttft_ms"]))
    print()
    if both:
        print(f"highest rate both sustain: {both[-1]:g} req/s; pd/colocated ITL p99 "
              f"{verdict['itl_p99_ratio']:.2f} (goal <= 0.5), output throughput "
              f"{verdict['output_throughput_ratio']:.2f} (goal >= 0.9): goal "
              f"{'met' if verdict['goal_met'] else 'not met'}")
    else:
        print("no rate sustained by both pd and colocated")
    text = plot(runs, args.plot, text=True)
    if text:
        print(text)
    if args.plot and text is not None:
        print(f"plot: {args.plot}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)
        print(f"json: {args.out}")


if __name__ == "__main__":
    main()
