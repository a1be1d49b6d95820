#!/usr/bin/env bash
# A Catch2 test name with '[' or ']' breaks catch_discover_tests: CMake's list handling
# swallows every later name of that binary into one ctest entry whose spec matches no test
# ("No tests ran", exit 0), so those tests silently stop running. A ';' is CMake's list
# separator: the ctest entry is cut there. Refuse such names.
#   scripts/check-test-names.sh [SOURCE_DIR]
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
bad=$(grep -rnE 'TEST_CASE\("[^"]*[][;]' "$root/tests" --include='*.cpp' || true)
if [ -n "$bad" ]; then
  echo "check-test-names: a test name holds '[', ']' or ';' (ctest would cut it or stop running the tests after it):"
  echo "$bad"
  exit 1
fi
echo "check-test-names: no test name holds '[', ']' or ';'"
