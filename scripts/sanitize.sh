#!/usr/bin/env bash
# Builds partune and its tests with AddressSanitizer and UndefinedBehaviorSanitizer
# (gcc, -DPARTUNE_SANITIZE=ON) into build-asan/ and runs the whole suite under them.
#   scripts/sanitize.sh [ctest arguments...]     e.g. -L reliability, -R cli_
# A sanitizer report fails its test: every report exits 86, and the logs are searched
# for reports that a test's own exit status would hide (a child process's, say). The
# only suppressions are leaks inside the libraries we link, each one explained in
# tests/sanitize/lsan.supp. Prints one summary line; exit status 1 unless clean.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD
./scripts/setup.sh >/dev/null

# Set before the build too: Catch2's test discovery runs the test binaries.
export ASAN_OPTIONS="exitcode=86:detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=0"
export LSAN_OPTIONS="suppressions=$here/tests/sanitize/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="exitcode=86:halt_on_error=1:print_stacktrace=1"

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DPARTUNE_SANITIZE=ON -DPARTUNE_WITH_CUDA=OFF "${launcher[@]}" >/dev/null
cmake --build build-asan -j "$(nproc)"

start=$(date +%s)
status=0
ctest --test-dir build-asan --output-on-failure "$@" >build-asan/sanitize.log 2>&1 || status=$?
elapsed=$(( $(date +%s) - start ))
tail -n 25 build-asan/sanitize.log
summary=$(grep -E '^[0-9]+% tests passed' build-asan/sanitize.log || echo "no test ran")
reports=$(cat build-asan/Testing/Temporary/LastTest*.log 2>/dev/null |
          grep -cE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' || true)
echo "sanitize.sh: $(date -u +%Y-%m-%d) ASan+UBSan, ${summary}, ${reports} sanitizer reports, ${elapsed} s (log: build-asan/sanitize.log)"
[ "$status" -eq 0 ] && [ "$reports" -eq 0 ]
