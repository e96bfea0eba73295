#!/usr/bin/env bash
# tests/lint/mutants-list.sh - a test of `make check`: the list of
# `make mutants` (tests/mutants/mutants.list) is current.  Every FROM
# stands on exactly one line of its FILE, and every test it names exists,
# so that a file moved or split, or a line rewritten, cannot leave a rule
# silently without its mutant (run.sh would call it invalid, but only when
# someone runs `make mutants`).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
list=${1:-$top/tests/mutants/mutants.list}
bad=0 n=0

while IFS=$'\t' read -r label file tests from to; do
	case $label in '' | '#'*) continue ;; esac
	n=$((n + 1))
	from=${from#"${from%%[!$'\t']*}"}
	if [ ! -f "$top/$file" ]; then
		echo "mutant '$label': no file $file"
		bad=1
		continue
	fi
	hits=$(grep -c -F -- "$from" "$top/$file")
	if [ "$hits" != 1 ]; then
		echo "mutant '$label': FROM is on $hits lines of $file: $from"
		bad=1
	fi
	for t in $tests; do
		if [ ! -e "$top/$t.c" ] && [ ! -e "$top/$t" ]; then
			echo "mutant '$label': no test $t"
			bad=1
		fi
	done
done <"$list"
echo "mutants-list: $n mutants checked"
exit $bad
