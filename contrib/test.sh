#!/usr/bin/env bash
# contrib/test.sh: the one command that runs the whole test suite (CI runs
# exactly this, through .ci/run).
#
#   bash contrib/test.sh
#
# Steps, each logged to build/logs/STEP.log and echoed:
#   deps       contrib/install-deps.sh (apt-get; no network when all present)
#   autoreconf autoreconf -fi in the source tree
#   debug      build/debug: configure --enable-debug, make, make check
#   asan       build/asan: configure --enable-debug --enable-sanitizers,
#              make check under ASAN_OPTIONS/UBSAN_OPTIONS that abort on the
#              first error or leak
#   valgrind   build/valgrind: configure --enable-debug, make, and the
#              mounted tests t0001, t0020, t0030, t0060 with the daemon under
#              valgrind memcheck (errors or definite leaks fail them)
#   distcheck  make distcheck in build/debug (configured --enable-debug): the
#              tarball builds, passes the suite from a read-only source tree,
#              installs, uninstalls and cleans.  Skipped when the debug check
#              already failed (it would only fail again, slower).
#              NRS_DISTCHECK_TESTS="..." limits the tests it runs (passed as
#              TESTS=...); by default it runs all of them.
#
# Then it prints the .log of every failing test (every skipped one too under
# CI=true), and closes with one line `N passed, N failed[, N skipped]`:
# the :test-result: lines of the .trs files of the debug and asan runs, plus
# the PASS:/FAIL:/... lines that distcheck's harness printed (distcheck
# deletes its build tree, .trs files included, when it succeeds), plus one
# failure per step that failed without a failing test to show for it (a
# compile error, a dist problem, a time-out).  Under CI=true a skip counts
# as a failure: CI machines have everything the tests need.
#
# Exit status: 0 only if every step succeeded and nothing failed.
#
# Whatever happens, no FUSE mount is left under build/ (lazy unmount) and no
# process started from a binary under build/ outlives the script.  Tests get
# TMPDIR=build/tmp, so their scratch mounts fall under that rule too.
#
# Knobs: NRS_JOBS (default 2), NRS_CHECK_TIMEOUT (seconds per make check,
# default 1800), NRS_SKIP_DEPS=1, NRS_SKIP_ASAN=1, NRS_SKIP_VALGRIND=1, NRS_SKIP_DISTCHECK=1
# (for local iteration; CI sets none of them).
set -uo pipefail
exec </dev/null

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
build=$root/build
logs=$build/logs
jobs=${NRS_JOBS:-2}
check_timeout=${NRS_CHECK_TIMEOUT:-1800}
in_ci=0
case "${CI:-}" in ""|0|false|no) ;; *) in_ci=1 ;; esac

export AM_COLOR_TESTS=no
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# libfuse 3.14 leaks on a failed mount; tests/lsan.supp names only that
export LSAN_OPTIONS=suppressions=$root/tests/lsan.supp
# An abort under ASan must not leave a core file in the tree per failure.
ulimit -c 0

failed_steps=()		# "why", for the summary
failed_logs=()		# the step log to show the end of, or "" (tests show why)

say() { printf '\n==> %s\n' "$*"; }

# Lazily unmount every FUSE mount under build/, then kill, by pid, every
# process still running a binary from build/ (daemons the tests started and
# lost, helpers stuck on a dead mount).
release_mounts() {
	local m pid exe
	[ -d "$build" ] || return 0
	# /proc/mounts escapes spaces as \040: printf %b undoes it.
	awk '$3 ~ /^fuse/ { print $2 }' /proc/mounts | while read -r m; do
		m=$(printf '%b' "$m")
		case "$m" in
		"$build"/*)
			echo "test.sh: unmounting leftover $m" >&2
			fusermount3 -u -z "$m" 2>/dev/null || umount -l "$m" 2>/dev/null ;;
		esac
	done
	for pid in $(ls /proc | grep -E '^[0-9]+$'); do
		[ "$pid" = $$ ] && continue
		exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
		case "$exe" in
		"$build"/*)
			echo "test.sh: killing leftover pid $pid ($exe)" >&2
			kill -KILL "$pid" 2>/dev/null ;;
		esac
	done
	return 0
}
trap release_mounts EXIT
trap 'exit 130' INT TERM HUP

# step NAME TIMEOUT CMD...: run CMD with a time limit (timeout signals the
# whole process group), output to the console and to build/logs/NAME.log.
# Returns CMD's status.
step() {
	local name=$1 limit=$2 rc
	shift 2
	say "$name: $*"
	timeout -k 30 "$limit" "$@" 2>&1 | tee -a "$logs/$name.log"
	rc=${PIPESTATUS[0]}
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		echo "test.sh: $name timed out after ${limit}s" | tee -a "$logs/$name.log"
		release_mounts
	fi
	return "$rc"
}

# fail WHY [LOGNAME]: record a failed step.
fail() {
	failed_steps+=("$1")
	failed_logs+=("${2:-}")
}

# Results of the .trs files under DIR (leftovers of a failed distcheck
# excluded: those are counted from its console output), one word per line.
trs_results() {
	[ -d "$1" ] || return 0
	find "$1" -path '*/_build/sub' -prune -o -name '*.trs' -print0 |
		xargs -0 -r grep -h '^:test-result:' | awk '{ print $2 }'
}

# Per-test result lines of the automake harness in a console log.
console_results() {
	[ -f "$1" ] || return 0
	sed -n -E 's/^(PASS|FAIL|SKIP|XFAIL|XPASS|ERROR): .*/\1/p' "$1"
}

count_bad() { grep -c -E '^(FAIL|XPASS|ERROR)$' || true; }

# ---- steps -------------------------------------------------------------------
# Out-of-tree builds need a source tree that is not configured in place.
if [ -f "$root/config.status" ]; then
	echo "test.sh: $root is configured in-tree; run 'make distclean' there first" >&2
	echo "0 passed, 1 failed"
	exit 1
fi
release_mounts
if [ -d "$build" ]; then
	chmod -R u+w "$build" 2>/dev/null	# distcheck leaves read-only trees
	rm -rf --one-file-system "$build"
fi
mkdir -p "$logs" "$build/tmp"
export TMPDIR=$build/tmp

started=$(date +%s)

if [ "${NRS_SKIP_DEPS:-0}" != 1 ]; then
	step deps 900 bash contrib/install-deps.sh ||
		fail "deps: contrib/install-deps.sh failed ($?)" deps
fi

# moto and boto3 (tests/fixtures/s3/moto.sh) come with the image's Python (pyenv),
# not with Debian's: the python3 that has them goes first in PATH, also
# where the caller's PATH does not name pyenv's shims.
for py in python3 "${PYENV_ROOT:-${HOME:-/root}/.pyenv}/shims/python3"; do
	py=$(command -v "$py" 2>/dev/null) || continue
	if "$py" -c 'import moto, boto3' 2>/dev/null; then
		PATH=$(dirname "$py"):$PATH
		export PATH
		break
	fi
done

ok_autoreconf=0
if step autoreconf 600 autoreconf -fi; then
	ok_autoreconf=1
else
	fail "autoreconf: failed ($?)" autoreconf
fi

# build_and_check NAME CONFIGURE-FLAGS...: configure + make + make check in
# build/NAME.  Returns 0, or 1 when make check ran and failed, or 2 when it
# did not get that far.
build_and_check() {
	local name=$1 dir=$build/$1 rc bad
	shift
	mkdir -p "$dir"
	(cd "$dir" && step "$name-configure" 600 "$root/configure" "$@")
	rc=$?
	if [ "$rc" -ne 0 ]; then
		fail "$name: configure failed ($rc)" "$name-configure"
		return 2
	fi
	(cd "$dir" && step "$name-make" 1200 make -j"$jobs")
	rc=$?
	if [ "$rc" -ne 0 ]; then
		fail "$name: make failed ($rc)" "$name-make"
		return 2
	fi
	if [ -n "${TESTS_SUBSET:-}" ]; then
		(cd "$dir" && step "$name-check" "$check_timeout" \
			make -j"$jobs" check TESTS="$TESTS_SUBSET")
	else
		(cd "$dir" && step "$name-check" "$check_timeout" make -j"$jobs" check)
	fi
	rc=$?
	[ "$rc" -eq 0 ] && return 0
	bad=$(trs_results "$dir" | count_bad)
	if [ "$bad" -eq 0 ]; then
		fail "$name: make check failed ($rc) with no failing test" "$name-check"
	else
		fail "$name: $bad failing tests"
	fi
	return 1
}

debug_rc=2 asan_rc=2 dist_rc=-1 valgrind_rc=-1
valgrind_tests="tests/integ/t0001-mount.sh tests/integ/t0020-stream.sh tests/integ/t0030-xattr.sh tests/integ/t0060-metrics.sh"
if [ "$ok_autoreconf" = 1 ]; then
	build_and_check debug --enable-debug
	debug_rc=$?
	if [ "${NRS_SKIP_ASAN:-0}" != 1 ]; then
		build_and_check asan --enable-debug --enable-sanitizers
		asan_rc=$?
	fi
	if [ "${NRS_SKIP_VALGRIND:-0}" != 1 ]; then
		# A subset under valgrind (memcheck): the daemon runs under it in
		# the mounted tests, and any error, or a definite leak at exit,
		# fails the test through the daemon's exit status.
		NRS_DAEMON_WRAPPER="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite" \
		NRS_MOUNT_TIMEOUT=60 NRS_UMOUNT_TIMEOUT=60 \
		TESTS_SUBSET="$valgrind_tests" \
			build_and_check valgrind --enable-debug
		valgrind_rc=$?
	fi
	if [ "${NRS_SKIP_DISTCHECK:-0}" = 1 ]; then
		:
	elif [ "$debug_rc" -ne 0 ]; then
		say "distcheck: not run, the debug build or check failed"
	else
		dc_args=(DISTCHECK_CONFIGURE_FLAGS=--enable-debug)
		if [ -n "${NRS_DISTCHECK_TESTS:-}" ]; then
			echo "test.sh: distcheck limited to TESTS=$NRS_DISTCHECK_TESTS"
			dc_args+=("TESTS=$NRS_DISTCHECK_TESTS")
		fi
		(cd "$build/debug" && step distcheck $((check_timeout + 1200)) \
			make -j"$jobs" distcheck "${dc_args[@]}")
		dist_rc=$?
		if [ "$dist_rc" -ne 0 ]; then
			bad=$(console_results "$logs/distcheck.log" | count_bad)
			if [ "$bad" -eq 0 ]; then
				fail "distcheck: failed ($dist_rc) with no failing test" distcheck
			else
				fail "distcheck: $bad failing tests"
			fi
		fi
	fi
fi
release_mounts

# ---- report ------------------------------------------------------------------
results=$( { trs_results "$build/debug"; trs_results "$build/asan";
	     trs_results "$build/valgrind";
	     console_results "$logs/distcheck.log"; } )
n_pass=$(grep -c -E '^(PASS|XFAIL)$' <<<"$results")
n_fail=$(grep -c -E '^(FAIL|XPASS|ERROR)$' <<<"$results")
n_skip=$(grep -c -E '^SKIP$' <<<"$results")

# The .log of every failing (or, in CI, skipped) test, wherever it ran,
# distcheck's leftover tree included.
bad_re='^:test-result: (FAIL|XPASS|ERROR)'
[ "$in_ci" = 1 ] && bad_re='^:test-result: (FAIL|XPASS|ERROR|SKIP)'
shown=0
while IFS= read -r -d '' trs; do
	grep -q -E "$bad_re" "$trs" || continue
	log=${trs%.trs}.log
	printf '\n======== %s: %s\n' "${log#"$root"/}" "$(grep -h '^:test-result:' "$trs" | awk '{ print $2 }' | sort | uniq -c | xargs)"
	if [ -f "$log" ]; then cat "$log"; else echo "(no log)"; fi
	shown=$((shown + 1))
done < <(find "$build" -name '*.trs' -print0 2>/dev/null | sort -z)
[ "$shown" -gt 0 ] && printf '======== end of %d failing test logs\n' "$shown"

# Steps that failed with no test to blame: show the end of their output.
step_failures=0
for i in "${!failed_steps[@]}"; do
	l=${failed_logs[$i]}
	[ -n "$l" ] || continue
	step_failures=$((step_failures + 1))
	[ -f "$logs/$l.log" ] || continue
	printf '\n======== last lines of build/logs/%s.log\n' "$l"
	tail -n 40 "$logs/$l.log"
done

echo
echo "test.sh: finished in $(( $(date +%s) - started ))s"
for i in "${!failed_steps[@]}"; do
	echo "test.sh: FAILED ${failed_steps[$i]}"
done
[ "$dist_rc" = -1 ] && [ "${NRS_SKIP_DISTCHECK:-0}" != 1 ] && echo "test.sh: distcheck was not run"

total_fail=$((n_fail + step_failures))
if [ "$in_ci" = 1 ]; then
	[ "$n_skip" -gt 0 ] && echo "test.sh: CI=true: $n_skip skipped tests count as failures"
	total_fail=$((total_fail + n_skip))
	echo "$n_pass passed, $total_fail failed"
else
	echo "$n_pass passed, $total_fail failed, $n_skip skipped"
fi
[ "$total_fail" -eq 0 ] && [ "${#failed_steps[@]}" -eq 0 ]
