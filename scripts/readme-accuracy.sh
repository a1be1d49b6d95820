#!/usr/bin/env bash
# The README's accuracy table is `partune reproduce --estimator --markdown` on the shipped
# tables, pasted between <!-- reproduce:begin --> and <!-- reproduce:end -->.
#
#   scripts/readme-accuracy.sh [--check] [--readme FILE] [PARTUNE]
#
# Without --check: rewrites the block (atomically: a temporary file beside it, then rename).
# With --check: changes nothing; exit 1 with a diff when the block is not the current output.
# PARTUNE defaults to build/partune. Exit 2: bad usage, no binary, markers missing or
# out of order, or reproduce failed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
check=0
readme="$root/README.md"
partune="$root/build/partune"
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check=1 ;;
    --readme) [ $# -ge 2 ] || { echo "readme-accuracy.sh: --readme needs a file" >&2; exit 2; }
              readme=$2; shift ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "readme-accuracy.sh: unknown option '$1' (--check, --readme FILE)" >&2; exit 2 ;;
    *) partune=$1 ;;
  esac
  shift
done
begin='<!-- reproduce:begin -->'
end='<!-- reproduce:end -->'
[ -x "$partune" ] || { echo "readme-accuracy.sh: $partune: no partune binary (build it, or pass its path)" >&2; exit 2; }
[ -f "$readme" ] || { echo "readme-accuracy.sh: $readme: no such file" >&2; exit 2; }
b=$(grep -nxF -- "$begin" "$readme" | cut -d: -f1 || true)
e=$(grep -nxF -- "$end" "$readme" | cut -d: -f1 || true)
if [ "$(wc -w <<<"$b")" != 1 ] || [ "$(wc -w <<<"$e")" != 1 ] || [ "$b" -ge "$e" ]; then
  echo "readme-accuracy.sh: $readme: needs one line '$begin' and, after it, one line '$end'" >&2
  exit 2
fi

tmp=$(mktemp "$(dirname "$readme")/.readme-accuracy.XXXXXX")
trap 'rm -f "$tmp" "$tmp.table"' EXIT
# The tables folder is named, so the output does not depend on PARTUNE_SCENARIOS.
if ! "$partune" reproduce "$root/scenarios/tables" --estimator --markdown >"$tmp.table"; then
  echo "readme-accuracy.sh: '$partune reproduce --estimator --markdown' failed" >&2
  exit 2
fi
{ head -n "$b" "$readme"; cat "$tmp.table"; tail -n "+$e" "$readme"; } >"$tmp"

if [ "$check" = 1 ]; then
  if cmp -s "$readme" "$tmp"; then
    echo "README accuracy table: equal to 'partune reproduce --estimator --markdown'"
    exit 0
  fi
  echo "README accuracy table differs from 'partune reproduce --estimator --markdown'" \
       "(run scripts/readme-accuracy.sh to regenerate it):"
  diff -u "$readme" "$tmp" | sed '1,2d' || true
  exit 1
fi
if cmp -s "$readme" "$tmp"; then
  echo "$readme: accuracy table already current"
  exit 0
fi
chmod --reference="$readme" "$tmp" 2>/dev/null || true
mv -f "$tmp" "$readme"
echo "$readme: accuracy table regenerated"
