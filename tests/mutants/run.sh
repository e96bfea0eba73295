#!/usr/bin/env bash
# tests/mutants/run.sh - mutation testing of the numbered safety rules
# (`make mutants`).
#
#	tests/mutants/run.sh [-l LIST] [-w WORKDIR] [-j JOBS] [-p SHARDS] [PATTERN]
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
#   FROM   a text that stands on exactly one line of FILE (TABs cannot be
#          part of it; leading TABs are dropped)
#   TO     what that one occurrence becomes (may be empty: deleted)
#
# Blank lines and lines starting with # are comments.  Only mutants whose
# LABEL contains PATTERN run, when one is given.
#
# The tree (tracked and untracked files alike, but no build/ and no .git)
# is copied to SHARDS trees under WORKDIR (default build/mutants under the
# source tree; SHARDS default 2), each configured --enable-debug (with
# -Wno-error: a mutant may leave a variable unused) and built; the tests
# of every mutant run first unmutated and must pass, so a survivor means
# the rule is not guarded, not that the tree was broken.  Then the shards
# take the mutants in turn, in parallel (most tests wait on the daemon,
# not on the CPU): FILE gets the change, the tree is rebuilt, TESTS run,
# FILE is restored.
#
#   killed    a test failed, or timed out: NRS_MUTANT_TIMEOUT seconds
#             (default 600, and 120 when every test is a unit test: a
#             mutant that deadlocks one is killed without waiting long)
#   survived  every test passed: the rule has no test that guards it
#   invalid   FROM is not on exactly one line, or the mutant does not
#             build: the list is out of date
#
# The last line is "N killed, M survived[, K invalid]"; the exit status is
# 0 only when nothing survived and nothing was invalid.  The source tree is
# never written: every change is made in a copy.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
list=$here/mutants.list
work=$top/build/mutants
jobs=${NRS_JOBS:-2}
shards=2

while getopts l:w:j:p: opt; do
	case $opt in
	l) list=$(cd "$(dirname "$OPTARG")" && pwd)/$(basename "$OPTARG") ;;
	w) work=$OPTARG ;;
	j) jobs=$OPTARG ;;
	p) shards=$OPTARG ;;
	*) echo "usage: $0 [-l LIST] [-w WORKDIR] [-j JOBS] [-p SHARDS] [PATTERN]" >&2
	   exit 2 ;;
	esac
done
shift $((OPTIND - 1))
pattern=${1:-}
[ -f "$list" ] || { echo "mutants: no list $list" >&2; exit 2; }
case $shards in ''|*[!0-9]*|0) echo "mutants: -p takes a count" >&2; exit 2 ;; esac
started=$(date +%s)

# label<TAB>file<TAB>tests<TAB>from<TAB>to, comments, blanks and other
# labels dropped
rows=()
while IFS= read -r r; do
	IFS=$'\t' read -r label _ <<<"$r"
	[ -n "$pattern" ] && [[ "$label" != *"$pattern"* ]] && continue
	rows+=("$r")
done < <(grep -v -E '^[[:space:]]*(#|$)' "$list")
[ "${#rows[@]}" -gt 0 ] || { echo "mutants: none match '$pattern'" >&2; exit 2; }

# Copy the tree afresh: a mutant left by an interrupted run cannot survive.
rm -rf "$work"
mkdir -p "$work/logs" "$work/tmp" || exit 2
export TMPDIR=$work/tmp

# make_tree K: the copy of shard K, configured and built (its log in
# logs/build.K.log).
make_tree() {
	local t=$work/tree.$1
	mkdir -p "$t" &&
	tar -C "$top" --exclude=./build --exclude=./.git -cf - . | tar -C "$t" -xf - &&
	rm -f "$t/config.status" "$t/config.h" "$t/Makefile" &&
	(cd "$t" && { [ -x configure ] || autoreconf -fi; } &&
	 mkdir -p _build && cd _build &&
	 ../configure --enable-debug -q CFLAGS="-g -O2 -Wno-error" &&
	 make -j"$jobs" -s && make -j"$jobs" -s check TESTS=)
}

echo "mutants: ${#rows[@]} mutants, $shards trees under $work"
pids=()
for ((k = 0; k < shards; k++)); do
	make_tree "$k" >"$work/logs/build.$k.log" 2>&1 &
	pids+=($!)
done
for ((k = 0; k < shards; k++)); do
	if ! wait "${pids[$k]}"; then
		tail -n 30 "$work/logs/build.$k.log"
		echo "mutants: the unmutated tree does not build"
		exit 2
	fi
done

run_tests() {	# OBJ TESTS LOG: 0 when every test passed in time
	local limit=${NRS_MUTANT_TIMEOUT:-} t
	if [ -z "$limit" ]; then
		limit=120
		for t in $2; do
			case $t in tests/unit/*) ;; *) limit=600 ;; esac
		done
	fi
	(cd "$1" && timeout -k 10 "$limit" make -j"$jobs" check TESTS="$2") >"$3" 2>&1
}

# The baseline: every listed test passes without a mutant.
all_tests=$(for r in "${rows[@]}"; do
	IFS=$'\t' read -r label file tests from to <<<"$r"
	printf '%s\n' $tests
done | sort -u | xargs)
echo "mutants: baseline run of $all_tests"
if ! NRS_MUTANT_TIMEOUT=${NRS_MUTANT_TIMEOUT:-1800} \
     run_tests "$work/tree.0/_build" "$all_tests" "$work/logs/baseline.log"; then
	grep -E '^(FAIL|ERROR):' "$work/logs/baseline.log"
	echo "mutants: the tests fail without a mutant; fix that first"
	exit 2
fi

# shard K: mutants K, K + shards, ...; one result line each, in
# logs/result.K: "N STATE TEXT".
shard() {
	local k=$1 tree=$work/tree.$1 obj=$work/tree.$1/_build i n hits src log
	local res=$work/logs/result.$1
	: >"$res"
	for ((i = k; i < ${#rows[@]}; i += shards)); do
		IFS=$'\t' read -r label file tests from to <<<"${rows[$i]}"
		n=$((i + 1))
		src=$tree/$file
		log=$work/logs/$n.log
		hits=$(grep -c -F -- "$from" "$src" 2>/dev/null)
		if [ "${hits:-0}" != 1 ]; then
			said "$n invalid   $label: '$from' is on ${hits:-0} lines of $file"
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
			said "$n invalid   $label: the mutant does not build ($log)"
		elif run_tests "$obj" "$tests" "$log"; then
			said "$n SURVIVED  $label ($file: $from -> $to)"
		else
			said "$n killed    $label by $(grep -h -E '^(FAIL|ERROR):' "$log" | awk '{print $2}' | xargs)"
		fi
		mv "$src.orig" "$src"
		touch "$src"
	done
}

# said LINE: one result, into the shard's file ($res) and, without its
# number, onto the terminal as it is found.
said() {
	printf '%s\n' "$*" >>"$res"
	printf '%s\n' "${*#* }"
}

pids=()
for ((k = 0; k < shards; k++)); do
	shard "$k" &
	pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done

results=$(cat "$work"/logs/result.* | sort -n)
killed=$(grep -c ' killed ' <<<"$results")
survived=$(grep -c ' SURVIVED ' <<<"$results")
invalid=$(grep -c ' invalid ' <<<"$results")
echo "mutants: ${#rows[@]} mutants in $(( $(date +%s) - started ))s; those not killed:"
grep -v ' killed ' <<<"$results" | cut -d' ' -f2-
if [ "$invalid" -gt 0 ]; then
	echo "$killed killed, $survived survived, $invalid invalid"
else
	echo "$killed killed, $survived survived"
fi
[ "$survived" -eq 0 ] && [ "$invalid" -eq 0 ]
