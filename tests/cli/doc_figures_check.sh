#!/bin/bash
# scripts/doc-figures.py catches drift and restores it, on a copy of a generated region:
# - --check on an altered region exits 1 naming the file, the line and the command, with a
#   diff and the command that regenerates the docs;
# - --write restores the region byte for byte; --check then passes;
# - indented markers (a list item) indent the output;
# - unpaired markers, an unknown option and a command that fails are exit 2.
# usage: doc_figures_check.sh PARTUNE REPO_ROOT
set -u
partune=$1
root=$2
fail() { echo "FAIL: $*"; exit 1; }
gen="$root/scripts/doc-figures.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmd="partune estimate scenarios/jobs/gpt2-small-local-cpu.yaml | grep -E '^ *(step|throughput)'"
cat >"$tmp/doc.md" <<EOF
# A page

Some text.

<!-- generated code: $cmd -->
<!-- end generated -->

- a list item:

  <!-- generated: partune estimate scenarios/jobs/gpt2-small-local-cpu.yaml | grep '^MFU' -->
  <!-- end generated -->
EOF
/usr/bin/python3 "$gen" --write --partune "$partune" "$tmp/doc.md" >/dev/null || fail "--write exited $?"
grep -q '^\$ partune estimate scenarios/jobs/gpt2-small-local-cpu.yaml$' "$tmp/doc.md" ||
  fail "a code region does not show its command: $(cat "$tmp/doc.md")"
grep -q '^```$' "$tmp/doc.md" || fail "a code region has no fence"
grep -q '^  MFU  ' "$tmp/doc.md" || fail "an indented region's output is not indented: $(cat "$tmp/doc.md")"
cp "$tmp/doc.md" "$tmp/good.md"
/usr/bin/python3 "$gen" --check --partune "$partune" "$tmp/doc.md" >/dev/null || fail "--check after --write exited $?"

# Drift: one figure changed.
sed -i -E '0,/[0-9]\.[0-9]/s/([0-9])\.([0-9])/\1.9\2/' "$tmp/doc.md"
cmp -s "$tmp/doc.md" "$tmp/good.md" && fail "could not alter the copy"
out=$(/usr/bin/python3 "$gen" --check --partune "$partune" "$tmp/doc.md"); rc=$?
[ "$rc" = 1 ] || fail "--check on an altered region exited $rc, not 1"
grep -qF "doc.md:5: the output of '$cmd' drifted" <<<"$out" || fail "no file:line and command in: $out"
grep -qF 'scripts/doc-figures.py --write' <<<"$out" || fail "no regenerate command in: $out"
grep -q '^+' <<<"$out" && grep -q '^-' <<<"$out" || fail "no diff in: $out"
/usr/bin/python3 "$gen" --write --partune "$partune" "$tmp/doc.md" >/dev/null || fail "rewriting exited $?"
cmp -s "$tmp/doc.md" "$tmp/good.md" || fail "--write did not restore the region"

# Exit 2 with a line naming the place.
expect2() {  # FILE WHAT
  err=$(/usr/bin/python3 "$gen" --check --partune "$partune" "$1" 2>&1 >/dev/null); rc=$?
  [ "$rc" = 2 ] && [[ "$err" == *"$2"* ]] || fail "$(basename "$1"): exit $rc, '$err' (wanted 2 and '$2')"
}
grep -v 'end generated' "$tmp/good.md" | head -n 6 >"$tmp/open.md"
expect2 "$tmp/open.md" "open.md:5: no '<!-- end generated -->'"
printf '<!-- generated often: partune --version -->\n<!-- end generated -->\n' >"$tmp/opt.md"
expect2 "$tmp/opt.md" "unknown option 'often'"
printf '<!-- generated: partune estimate no-such.yaml -->\n<!-- end generated -->\n' >"$tmp/bad.md"
expect2 "$tmp/bad.md" "exited 2, not 0"
echo "doc-figures.py: drift named by file, line and command, restored by --write; bad markers exit 2"
