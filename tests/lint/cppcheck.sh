#!/usr/bin/env bash
# tests/lint/cppcheck.sh - a test of `make check`: cppcheck finds nothing
# in the daemon, the tools and the test helpers (STYLE.md: "cppcheck
# clean").  Run from the build tree, whose config.h the sources include;
# cppcheck comes with contrib/install-deps.sh, so a missing one fails
# rather than skips.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)

if ! command -v cppcheck >/dev/null 2>&1; then
	echo "cppcheck: not installed (contrib/install-deps.sh installs it)"
	exit 1
fi
[ -f config.h ] || { echo "cppcheck: run me from the build tree (config.h)"; exit 1; }

cppcheck --quiet --error-exitcode=1 -j 2 \
	--enable=warning,performance,portability \
	--suppress=missingIncludeSystem \
	-D_GNU_SOURCE -I . -I "$top/src" -I "$top/include" \
	"$top"/src/*/*.c "$top"/tools/*.c "$top"/tests/helpers/*.c
rc=$?
[ $rc -eq 0 ] && echo "cppcheck: $(ls "$top"/src/*/*.c "$top"/tools/*.c "$top"/tests/helpers/*.c | wc -l) files, nothing found"
exit $rc
