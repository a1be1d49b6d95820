#!/usr/bin/env bash
# Error messages never echo a raw byte that is not printable UTF-8: a job file whose
# model name holds 0xff is refused (exit 2) with one line that reads \xff, while valid
# UTF-8 (café) is printed as it is.
# Usage: error_bytes_check.sh PARTUNE OUT_DIR
set -euo pipefail
partune=$1 out=$2
rm -rf "$out" && mkdir -p "$out"
printf 'kind: job\nname: bytes\nmodel: gpt2-smal\xff\xfe\n' > "$out/raw-byte.yaml"
printf 'kind: job\nname: bytes\nmodel: caf\xc3\xa9\n' > "$out/utf8.yaml"
status=0
"$partune" estimate "$out/raw-byte.yaml" > /dev/null 2> "$out/raw-byte.err" || status=$?
[ "$status" = 2 ] || { echo "exit status $status, expected 2"; exit 1; }
[ "$(wc -l < "$out/raw-byte.err")" = 1 ] || { echo "not one line:"; cat -v "$out/raw-byte.err"; exit 1; }
grep -qF "model: 'gpt2-smal\\xff\\xfe'" "$out/raw-byte.err" || { echo "no \\xff\\xfe in:"; cat -v "$out/raw-byte.err"; exit 1; }
if LC_ALL=C grep -q $'[\x80-\xff]' "$out/raw-byte.err"; then echo "a raw byte on stderr:"; cat -v "$out/raw-byte.err"; exit 1; fi
status=0
"$partune" estimate "$out/utf8.yaml" > /dev/null 2> "$out/utf8.err" || status=$?
[ "$status" = 2 ] || { echo "exit status $status, expected 2"; exit 1; }
grep -qF "model: 'café'" "$out/utf8.err" || { echo "café not kept in:"; cat -v "$out/utf8.err"; exit 1; }
echo "escaped: $(cat "$out/raw-byte.err")"
