#!/usr/bin/env python3
"""Validates random outputs of the JSON Schema corpus against their schemas.

Runs the grammar_sample binary (path given as the first argument), which samples outputs under
the token mask of the shipped model's vocabulary, and checks each with python3-jsonschema
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
        print("usage: validate_json_samples.py <grammar_sample> [seeds] [max_tokens]")
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
