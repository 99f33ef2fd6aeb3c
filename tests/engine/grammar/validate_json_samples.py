#!/usr/bin/env python3
"""Validates sampled outputs of the JSON Schema corpus against their schemas.

Runs the sampling binary (path given as the first argument): grammar_sample, which draws tokens
uniformly among those the token mask of the shipped model's vocabulary allows, or
grammar_model_sample, whose outputs the shipped model samples through the Scheduler at
temperature 1. Both print one JSON line per output ({"name", "seed", "schema", "output"}); each
output is checked with python3-jsonschema
(Debian's python3-jsonschema; exit code 77 = skipped when it is missing). Exit code 1 lists the
outputs that do not parse or do not validate.
"""
import json
import subprocess
import sys

try:
    import jsonschema
except ImportError:
    print("python3-jsonschema is not installed: skipped")
    sys.exit(77)


def main():
    if len(sys.argv) < 2:
        print("usage: validate_json_samples.py <sampling binary> [its arguments...]")
        return 2
    args = [sys.argv[1]] + sys.argv[2:4]
    lines = subprocess.run(args, check=True, capture_output=True, text=True,
                           timeout=540).stdout.splitlines()
    failures = []
    for line in lines:
        sample = json.loads(line)
        try:
            value = json.loads(sample["output"])
            jsonschema.validate(value, sample["schema"])
        except (ValueError, jsonschema.ValidationError) as error:
            failures.append(f'{sample["name"]} seed {sample["seed"]}: {sample["output"]!r}: '
                            f'{str(error).splitlines()[0]}')
    print(f"{len(lines) - len(failures)}/{len(lines)} sampled outputs validate")
    for failure in failures:
        print("FAIL", failure)
    return 1 if failures or not lines else 0


if __name__ == "__main__":
    sys.exit(main())
