#!/usr/bin/env bash
# Fails if any tracked C++ file differs from the repository's .clang-format.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cc' '*.h' | grep -v -E '^(third_party|build)/' || true)
[ "${#files[@]}" -eq 0 ] && exit 0
if ! clang-format --dry-run --Werror "${files[@]}" 2>/tmp/tandem-format.$$; then
  grep -E '^[^ ].*: error' /tmp/tandem-format.$$ | cut -d: -f1 | sort -u | sed 's/^/  needs clang-format: /'
  rm -f /tmp/tandem-format.$$
  echo "format: run clang-format -i on the files above" >&2
  exit 1
fi
rm -f /tmp/tandem-format.$$
echo "format: ${#files[@]} files clean"
