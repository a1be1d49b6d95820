#!/usr/bin/env bash
# Output files appear whole or not at all (issue 12, item 4d), checked on `partune search
# --write-job` and `partune simulate --trace`:
#   output_integrity.sh PARTUNE JOB SCRATCH_DIR
# - a symbolic link to /dev/full as the target: refused (exit 2), the link untouched;
# - a disk that fills up during the write (RLIMIT_FSIZE 0 with SIGXFSZ ignored: write()
#   fails with EFBIG, as it fails with ENOSPC on a full disk; this runs everywhere):
#   exit 1, the old file untouched, no temporary file left; the same on a real 8 KiB
#   tmpfs when this machine lets the test mount one;
# - standard output on /dev/full: exit 1, one line naming standard output.
set -u
partune=$1
job=$2
scratch=$3
failed=0
rm -rf "$scratch" && mkdir -p "$scratch"

fail() {
  echo "FAIL: $*"
  failed=1
}
# stderr without AddressSanitizer's three-line warning about a stack switch it cannot
# follow (google/sanitizers#189): a note of the sanitizer build, not partune's output.
own_stderr() {
  sed -e '/^==[0-9]*==WARNING: ASan is ignoring requested __asan_handle_no_return/d' \
      -e '/^False positive error reports may follow$/d' \
      -e '/^For details see https:\/\/github.com\/google\/sanitizers\/issues\/189$/d' "$1"
}
# $1: expected status; $2: the status; $3: stderr file; $4: what ran.
expect_status() {
  [ "$2" = "$1" ] || fail "$4: exit status $2, expected $1 (stderr: $(cat "$3"))"
  [ "$(own_stderr "$3" | wc -l)" = 1 ] || fail "$4: expected one line on stderr, got: $(cat "$3")"
}
only_file() {  # the folder $1 holds exactly the file $2 (no temporary left behind)
  local names
  names=$(ls -A "$1")
  [ "$names" = "$2" ] || fail "$1 holds '$names', expected only '$2'"
}

# 1. A symbolic link to a device: refused before the search runs.
ln -s /dev/full "$scratch/best.yaml"
"$partune" search "$job" --estimator-only --write-job "$scratch/best.yaml" > /dev/null 2> "$scratch/err"
expect_status 2 $? "$scratch/err" "search --write-job <symlink to /dev/full>"
grep -q "$scratch/best.yaml: is not a regular file" "$scratch/err" || fail "the message does not name the link: $(cat "$scratch/err")"
[ "$(readlink "$scratch/best.yaml")" = /dev/full ] || fail "the link was replaced"
rm -f "$scratch/best.yaml" "$scratch/err"

# 2. The disk fills up during the write: the old file stays, nothing else appears.
mkdir "$scratch/full"
echo "old contents" > "$scratch/full/best.yaml"
# ulimit -f 0: not one byte more may be written to a regular file. Standard output and
# error go through pipes (the limit would cut them too), read into files by `cat`.
on_full_disk() {  # runs partune "$@" on a full disk; its status in $status, output in out/err
  rm -f "$scratch/o" "$scratch/e" && mkfifo "$scratch/o" "$scratch/e"
  cat "$scratch/o" > "$scratch/out" &
  cat "$scratch/e" > "$scratch/err" &
  (trap '' XFSZ; ulimit -f 0; exec "$partune" "$@") > "$scratch/o" 2> "$scratch/e"
  status=$?
  wait
  rm -f "$scratch/o" "$scratch/e"
}
on_full_disk search "$job" --estimator-only --write-job "$scratch/full/best.yaml"
expect_status 1 "$status" "$scratch/err" "search --write-job on a full disk"
grep -q "$scratch/full/best.yaml: cannot write: File too large" "$scratch/err" || fail "message: $(cat "$scratch/err")"
grep -q "^wrote" "$scratch/out" && fail "search said it wrote the file"
[ "$(cat "$scratch/full/best.yaml")" = "old contents" ] || fail "the old file was changed"
only_file "$scratch/full" best.yaml
on_full_disk simulate "$job" --trace "$scratch/full/trace.json"
expect_status 1 "$status" "$scratch/err" "simulate --trace on a full disk"
grep -q "$scratch/full/trace.json: cannot write: File too large" "$scratch/err" || fail "message: $(cat "$scratch/err")"
only_file "$scratch/full" best.yaml
rm -rf "$scratch/full"

# 2b. A real full file system, where mounting one is allowed (root, no container limits).
mkdir "$scratch/tmpfs"
if mount -t tmpfs -o size=8k tmpfs "$scratch/tmpfs" 2> /dev/null; then
  echo "old contents" > "$scratch/tmpfs/best.yaml"
  head -c 8192 /dev/zero > "$scratch/tmpfs/filler" 2> /dev/null  # fill what is left
  "$partune" search "$job" --estimator-only --write-job "$scratch/tmpfs/best.yaml" > /dev/null 2> "$scratch/err"
  status=$?
  [ "$status" != 0 ] || fail "search --write-job on a full tmpfs exited 0"
  grep -q "$scratch/tmpfs/best.yaml: " "$scratch/err" || fail "message: $(cat "$scratch/err")"
  [ "$(cat "$scratch/tmpfs/best.yaml")" = "old contents" ] || fail "the old file on the full tmpfs was changed"
  [ "$(ls -A "$scratch/tmpfs" | sort | tr '\n' ' ')" = "best.yaml filler " ] || fail "left on the tmpfs: $(ls -A "$scratch/tmpfs")"
  umount "$scratch/tmpfs"
  echo "ok: a real 8 KiB tmpfs, full: exit $status"
else
  echo "skipped: a real full tmpfs (mount -t tmpfs is not allowed here); the RLIMIT_FSIZE case above covers the same path"
fi
rmdir "$scratch/tmpfs"

# 3. Standard output that cannot be written.
if [ -w /dev/full ]; then
  "$partune" estimate "$job" --json > /dev/full 2> "$scratch/err"
  expect_status 1 $? "$scratch/err" "estimate --json > /dev/full"
  grep -q "partune: error: standard output: " "$scratch/err" || fail "message: $(cat "$scratch/err")"
fi

rm -rf "$scratch"
[ "$failed" = 0 ] && echo "ok: every output was whole or absent"
exit $failed
