#!/usr/bin/env bash
# tests/mutants/run.sh - mutation testing of the numbered safety rules
# (`make mutants`).
#
#	tests/mutants/run.sh [-l LIST] [-w WORKDIR] [-j JOBS] [PATTERN]
#
# A safety rule is guarded only if breaking it makes a test fail (STYLE.md,
# "Mutants"; SQLite's testing page calls this mutation testing).  LIST
# (default: mutants.list beside this script) names one mutant a line, five
# fields separated by TABs:
#
#	LABEL	FILE	TESTS	FROM	TO
#
#   LABEL  the rule it breaks, as the source labels it ("RC3 stale epoch")
#   FILE   the source file, relative to the top of the tree
#   TESTS  the tests that guard the rule, space-separated, as for
#          `make check TESTS=...`
#   FROM   a text that stands on exactly one line of FILE
#   TO     what that one occurrence becomes (may be empty: deleted)
#
# Blank lines and lines starting with # are comments.  Only mutants whose
# LABEL contains PATTERN run, when one is given.
#
# The tree (tracked and untracked files alike, but no build/ and no .git)
# is copied to WORKDIR (default build/mutants under the source tree),
# configured --enable-debug once (with -Wno-error: a mutant may leave a
# variable unused) and built; the tests of every mutant run
# there first unmutated and must pass, so a survivor means the rule is not
# guarded, not that the tree was broken.  Then, for each mutant: FILE gets
# the change, the tree is rebuilt, TESTS run, FILE is restored.
#
#   killed    a test failed (or timed out, NRS_MUTANT_TIMEOUT seconds, 600)
#   survived  every test passed: the rule has no test that guards it
#   invalid   FROM is not on exactly one line, or the mutant does not
#             build: the list is out of date
#
# The last line is "N killed, M survived[, K invalid]"; the exit status is
# 0 only when nothing survived and nothing was invalid.  The source tree is
# never written: every change is made in the copy.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
list=$here/mutants.list
work=$top/build/mutants
jobs=${NRS_JOBS:-2}
limit=${NRS_MUTANT_TIMEOUT:-600}

while getopts l:w:j: opt; do
	case $opt in
	l) list=$(cd "$(dirname "$OPTARG")" && pwd)/$(basename "$OPTARG") ;;
	w) work=$OPTARG ;;
	j) jobs=$OPTARG ;;
	*) echo "usage: $0 [-l LIST] [-w WORKDIR] [-j JOBS] [PATTERN]" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
pattern=${1:-}
[ -f "$list" ] || { echo "mutants: no list $list" >&2; exit 2; }

tree=$work/tree
obj=$tree/_build
logs=$work/logs
started=$(date +%s)

# Copy the tree afresh: a mutant left by an interrupted run cannot survive.
rm -rf "$tree" "$logs"
mkdir -p "$tree" "$logs" || exit 2
tar -C "$top" --exclude=./build --exclude=./.git -cf - . | tar -C "$tree" -xf - || exit 2
rm -f "$tree/config.status" "$tree/config.h" "$tree/Makefile"
export TMPDIR=$work/tmp
mkdir -p "$TMPDIR"

echo "mutants: building a debug tree in $obj"
if ! (cd "$tree" && { [ -x configure ] || autoreconf -fi; } &&
      mkdir -p "$obj" && cd "$obj" && ./../configure --enable-debug -q CFLAGS="-g -O2 -Wno-error" &&
      make -j"$jobs" -s && make -j"$jobs" -s check TESTS=) >"$logs/build.log" 2>&1; then
	tail -n 30 "$logs/build.log"
	echo "mutants: the unmutated tree does not build"
	exit 2
fi

# label<TAB>file<TAB>tests<TAB>from<TAB>to, comments and blanks dropped
mapfile -t rows < <(grep -v -E '^[[:space:]]*(#|$)' "$list")

run_tests() {	# TESTS LOG: 0 when every test passed
	(cd "$obj" && timeout -k 10 "$limit" make -j"$jobs" check TESTS="$1") >"$2" 2>&1
}

# The baseline: every listed test passes without a mutant.
all_tests=$(for r in "${rows[@]}"; do
	IFS=$'\t' read -r label file tests from to <<<"$r"
	[ -n "$pattern" ] && [[ "$label" != *"$pattern"* ]] && continue
	printf '%s\n' $tests
done | sort -u | xargs)
echo "mutants: baseline run of $all_tests"
if ! run_tests "$all_tests" "$logs/baseline.log"; then
	grep -E '^(FAIL|ERROR):' "$logs/baseline.log"
	echo "mutants: the tests fail without a mutant; fix that first"
	exit 2
fi

killed=0 survived=0 invalid=0 n=0
for r in "${rows[@]}"; do
	IFS=$'\t' read -r label file tests from to <<<"$r"
	[ -n "$pattern" ] && [[ "$label" != *"$pattern"* ]] && continue
	n=$((n + 1))
	src=$tree/$file
	log=$logs/$n.log
	hits=$(grep -c -F -- "$from" "$src" 2>/dev/null)
	if [ "${hits:-0}" != 1 ]; then
		echo "invalid   $label: '$from' is on ${hits:-0} lines of $file"
		invalid=$((invalid + 1))
		continue
	fi
	cp -p "$src" "$src.orig"
	FROM=$from TO=$to awk '
		BEGIN { from = ENVIRON["FROM"]; to = ENVIRON["TO"] }
		!done && (i = index($0, from)) {
			$0 = substr($0, 1, i - 1) to substr($0, i + length(from))
			done = 1
		}
		{ print }' "$src.orig" >"$src"
	if ! (cd "$obj" && make -j"$jobs" -s) >"$log" 2>&1; then
		echo "invalid   $label: the mutant does not build ($log)"
		invalid=$((invalid + 1))
	elif run_tests "$tests" "$log"; then
		echo "SURVIVED  $label ($file: $from -> $to)"
		survived=$((survived + 1))
	else
		echo "killed    $label by $(grep -h -E '^(FAIL|ERROR):' "$log" | awk '{print $2}' | xargs)"
		killed=$((killed + 1))
	fi
	mv "$src.orig" "$src"
	touch "$src"
done
(cd "$obj" && make -j"$jobs" -s) >/dev/null 2>&1

echo "mutants: $n mutants in $(( $(date +%s) - started ))s"
if [ "$invalid" -gt 0 ]; then
	echo "$killed killed, $survived survived, $invalid invalid"
else
	echo "$killed killed, $survived survived"
fi
[ "$survived" -eq 0 ] && [ "$invalid" -eq 0 ]
