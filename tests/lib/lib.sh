# lib.sh - shared by the numbered integration tests (tests/integ/tNNNN-*.sh).
# It and the other scripts they source live in tests/lib/: the providers
# of an object store (dirstore.sh, s3.sh, moto.sh) and their helpers
# (objlib.sh, smallfs.sh), and the suites every provider runs (objects.sh,
# lifecycle.sh, compaction.sh), each sourced as "$nrs_lib/NAME.sh".  The
# S3 servers they start are a fixture, in tests/fixtures/s3/.
#
# A test script sets test_description, sources this file, then runs
# test_expect_success steps and ends with test_done:
#
#	test_description='what this script covers'
#	. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
#	test_expect_success 'stream appends' '
#		nrs_mount &&
#		echo abc >>"$MNT/s" &&
#		test "$(cat "$MNT/s")" = abc
#	'
#	test_done
#
# Each step's body is eval'd in the script's own shell (variables set by
# one step are seen by the next), as a chain of &&-joined commands; a step
# fails if the chain does, if the daemon died under it, or if a sanitizer
# reported anything in the daemon's log.  Output is "ok N - ..." /
# "not ok N - ..." with the body and the log tail for failures, then a
# summary; the exit status is 0 only if every step passed.
#
# Every script gets a scratch directory $TRASH with $MNT (mount point),
# $DATA (the daemon's data directory) and $LOG (the daemon's stderr, every
# mount of the script appended).  An EXIT trap unmounts (lazily if need
# be), kills the daemon and every process started with nrs_bg, and removes
# $TRASH: a stuck FUSE mount would hang the next run.  A watchdog aborts a
# script that runs longer than NRS_TEST_TIMEOUT seconds (default 300) by
# killing the daemon, which fails every request blocked on the mount; the
# limit is read as each step starts, so a file the script sources after
# this one may set it (objwal.sh does).
# Anything else a script starts that must not outlive it (a server) is
# stopped by a command it registers with nrs_at_exit: the EXIT trap runs
# those once the daemon is gone, and so does the watchdog if the script
# dies without running its trap.
#
# Environment (set by make check; defaults suit a run from the build tree):
#   NEREUSFS        the daemon binary
#   NRS_HELPERS     directory of nrs-syscalls, nrs-appender, nrs-verify,
#                   nrs-tail (put first in PATH)
#   NRS_MOUNT_TIMEOUT, NRS_UMOUNT_TIMEOUT  seconds (10, 30): raise them
#                   for slow builds (valgrind)
#   NRS_DAEMON_WRAPPER  a command line the daemon runs under, e.g.
#                   "valgrind -q --error-exitcode=99" (its exit status is
#                   then checked at unmount like the daemon's)
#   CI=true         a missing /dev/fuse fails instead of skipping (77)
#   NRS_KEEP_TRASH=1  keep $TRASH (not when it is still mounted)
#   NRS_MOUNT_OPTS  daemon arguments every nrs_mount adds before its own
#                   (e.g. "-o write_once=auto": a script rerun over another
#                   path, t0301, t0401; a script's own -o comes later, and
#                   wins)
#   NRS_TEST_NAME   the name the script goes by (such a rerun's own)
# The daemon may be a sanitizer build; ASAN_OPTIONS/UBSAN_OPTIONS pass
# through, and any sanitizer report in $LOG fails the step that caused it.

: "${test_description:?set test_description before sourcing lib.sh}"

this_test=${NRS_TEST_NAME:-$(basename "$0" .sh)}
nrs_top=$(cd "$(dirname "$0")/../.." && pwd)
# The scripts a test sources after this one (objlib.sh, s3.sh, the
# suites ...) live beside it, apart from the numbered scripts.
nrs_lib=$nrs_top/tests/lib
NEREUSFS=${NEREUSFS:-$nrs_top/nereusfs}
NRS_HELPERS=${NRS_HELPERS:-$nrs_top/tests/helpers}
NRS_MOUNT_TIMEOUT=${NRS_MOUNT_TIMEOUT:-10}
NRS_UMOUNT_TIMEOUT=${NRS_UMOUNT_TIMEOUT:-30}
PATH=$NRS_HELPERS:$PATH
export PATH NEREUSFS NRS_HELPERS
# Predictable tools output.
LC_ALL=C
export LC_ALL

echo "# $this_test: $test_description"

# ---- prerequisites ----------------------------------------------------

# Skip (77) only when the machine cannot mount FUSE at all; in CI, fail.
nrs_skip_all () {
	if [ "${CI:-}" = true ]; then
		echo "FATAL: $1 (CI=true: a missing prerequisite is a failure)"
		exit 1
	fi
	echo "1..0 # SKIP $1"
	exit 77
}

# Anything else missing is an error of the test machine's setup (99).
nrs_error () {
	echo "ERROR: $*"
	exit 99
}

[ -c /dev/fuse ] || nrs_skip_all "/dev/fuse is missing"
[ -x "$NEREUSFS" ] || nrs_error "no daemon binary at $NEREUSFS (run make)"
for t in nrs-syscalls nrs-appender nrs-verify nrs-tail; do
	[ -x "$NRS_HELPERS/$t" ] || nrs_error "no helper $NRS_HELPERS/$t (run make check)"
done
for t in fusermount3 getfattr setfattr python3 timeout; do
	command -v $t >/dev/null 2>&1 ||
		nrs_error "missing tool $t (contrib/ has the dependency installer)"
done

# ---- scratch directory, cleanup, watchdog -----------------------------

TRASH=$(mktemp -d "${TMPDIR:-/tmp}/nrs-$this_test.XXXXXX") ||
	nrs_error "mktemp failed"
MNT=$TRASH/mnt
DATA=$TRASH/data
LOG=$TRASH/daemon.log
# The data directory is private: nereusfs refuses one that others can read
# or write (fileio.h DM2), and mkdir would make it 0755 under umask 022.
if ! mkdir "$MNT" || ! mkdir -m 700 "$DATA" || ! : >"$LOG"; then
	nrs_error "cannot populate $TRASH"
fi

NRS_PID=		# the daemon, while it runs
NRS_BG_PIDS=		# processes started by nrs_bg
NRS_LAST_BG=
NRS_EXIT=

# Is $MNT in the mount table?  (stat would hang or fail on a dead mount.)
nrs_is_mounted () {
	awk -v m="$MNT" '$5 == m { found = 1 } END { exit !found }' \
		/proc/self/mountinfo
}

# Detach whatever is mounted on $MNT, lazily: a dead FUSE mount is not
# busy but cannot be unmounted normally either.
nrs_detach () {
	nrs_is_mounted || return 0
	fusermount3 -u -z "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null
	! nrs_is_mounted
}

# Is process $1 one of ours (its command line names $TRASH)?  Guards the
# kills that work from pid files against reused pids.
nrs_is_ours () {
	[ -n "$1" ] && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF "$TRASH"
}

# The daemon is gone (exited and reaped, or never started).
nrs_forget_daemon () {
	NRS_PID=
	rm -f "$TRASH/daemon.pid"
}

nrs_cleanup () {
	local rc=$? p
	set +e
	trap - EXIT
	[ -n "${nrs_watchdog_pid:-}" ] && kill "$nrs_watchdog_pid" 2>/dev/null
	[ "${nrs_in_step:-0}" = 1 ] && cat "$TRASH/step.out" 2>/dev/null
	if [ -f "$TRASH/timed-out" ]; then
		cat "$TRASH/timed-out"
		nrs_show_log
	fi
	for p in $NRS_BG_PIDS; do
		kill -TERM "$p" 2>/dev/null
	done
	if [ -n "$NRS_PID" ] && kill -0 "$NRS_PID" 2>/dev/null; then
		fusermount3 -u "$MNT" 2>/dev/null
		nrs_wait_exit 10 || kill -9 "$NRS_PID" 2>/dev/null
		wait "$NRS_PID" 2>/dev/null
	fi
	nrs_forget_daemon
	nrs_detach || echo "WARNING: $MNT is still mounted"
	for p in $NRS_BG_PIDS; do
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	nrs_run_at_exit
	if nrs_is_mounted; then
		echo "ERROR: leaving $TRASH (still mounted)"
		rc=1
	elif [ "${NRS_KEEP_TRASH:-}" = 1 ]; then
		echo "# kept $TRASH"
	else
		rm -rf --one-file-system "$TRASH"
	fi
	exit $rc
}

# nrs_at_exit COMMAND: run the shell command line COMMAND (eval'd, so
# quote what it names) when the script ends, after the daemon is gone and
# before $TRASH is removed; commands run in the order registered, each
# once.  For servers and the like a test starts (see tests/lib/s3.sh).
nrs_at_exit () {
	printf '%s\n' "$1" >>"$TRASH/at-exit"
}

nrs_run_at_exit () {
	local cmd
	[ -f "$TRASH/at-exit" ] || return 0
	mv "$TRASH/at-exit" "$TRASH/at-exit.run" || return 0
	while IFS= read -r cmd; do
		eval "$cmd"
	done <"$TRASH/at-exit.run"
}

# The watchdog, a background loop that outlives nothing: past the time
# limit it kills the daemon (so requests blocked on the mount fail and the
# script reaches its EXIT trap) and then the script; and if the script dies
# without running its trap (SIGKILL, SIGPIPE when piped into head), it
# kills what the script started, detaches the mount, runs the nrs_at_exit
# commands and removes $TRASH.  The limit is in $TRASH/timeout, which
# every step writes (nrs_set_timeout).
nrs_parent=$$
nrs_set_timeout () {
	echo "${NRS_TEST_TIMEOUT:-300}" >"$TRASH/timeout.new" &&
		mv "$TRASH/timeout.new" "$TRASH/timeout"
}
nrs_set_timeout
(
	trap - EXIT HUP INT TERM PIPE
	exec >/dev/null 2>&1 </dev/null
	n=0
	limit=300
	fired=
	while [ -d "$TRASH" ]; do
		if ! kill -0 "$nrs_parent" 2>/dev/null; then
			for p in $(cat "$TRASH/daemon.pid" "$TRASH/bg.pids" 2>/dev/null); do
				nrs_is_ours "$p" && kill -9 "$p"
			done
			fusermount3 -u -z "$MNT" || umount -l "$MNT"
			nrs_run_at_exit
			nrs_is_mounted || rm -rf --one-file-system "$TRASH"
			exit 0
		fi
		read -r limit <"$TRASH/timeout" || :
		if [ -z "$fired" ] && [ $n -ge $((limit * 2)) ]; then
			fired=1
			echo "FATAL: $this_test ran over $limit s; aborted" \
				>"$TRASH/timed-out"
			p=$(cat "$TRASH/daemon.pid" 2>/dev/null)
			nrs_is_ours "$p" && kill -9 "$p"
			kill -TERM "$nrs_parent"
		fi
		sleep 0.5
		n=$((n + 1))
	done
) &
nrs_watchdog_pid=$!

trap nrs_cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 141' PIPE

# ---- the daemon -------------------------------------------------------

nrs_show_log () {
	echo "--- last lines of $LOG:"
	tail -n 40 "$LOG" | sed 's/^/| /'
	echo "---"
}

# Wait up to $1 seconds for the daemon to exit; its status in NRS_EXIT.
nrs_wait_exit () {
	local n=0
	while kill -0 "$NRS_PID" 2>/dev/null; do
		[ $n -ge $(($1 * 10)) ] && return 1
		sleep 0.1
		n=$((n + 1))
	done
	wait "$NRS_PID"
	NRS_EXIT=$?
	return 0
}

# nrs_mount [daemon args, e.g. -o opt]: start the daemon in the foreground
# on $MNT with -o data=$DATA; return once the mount answers and the daemon
# is alive.
nrs_mount () {
	if [ -n "$NRS_PID" ]; then
		echo "nrs_mount: already mounted (pid $NRS_PID)"
		return 1
	fi
	nrs_is_mounted && { echo "nrs_mount: something is on $MNT"; return 1; }
	echo "=== $this_test: mount ${NRS_MOUNT_OPTS:+$NRS_MOUNT_OPTS }$*" >>"$LOG"
	# shellcheck disable=SC2086 # the wrapper and the options are command lines
	${NRS_DAEMON_WRAPPER:-} "$NEREUSFS" -f -o "data=$DATA" ${NRS_MOUNT_OPTS:-} "$@" "$MNT" >>"$LOG" 2>&1 &
	NRS_PID=$!
	echo "$NRS_PID" >"$TRASH/daemon.pid"
	local n=0
	while :; do
		if ! kill -0 "$NRS_PID" 2>/dev/null; then
			wait "$NRS_PID"
			echo "nrs_mount: nereusfs exited with status $? before mounting"
			nrs_forget_daemon
			nrs_detach
			nrs_show_log
			return 1
		fi
		if nrs_is_mounted &&
		   timeout "$NRS_MOUNT_TIMEOUT" stat "$MNT" >/dev/null 2>&1 &&
		   kill -0 "$NRS_PID" 2>/dev/null; then
			return 0
		fi
		if [ $n -ge $((NRS_MOUNT_TIMEOUT * 10)) ]; then
			echo "nrs_mount: $MNT not mounted after $NRS_MOUNT_TIMEOUT s"
			kill -9 "$NRS_PID" 2>/dev/null
			wait "$NRS_PID" 2>/dev/null
			nrs_forget_daemon
			nrs_detach
			nrs_show_log
			return 1
		fi
		sleep 0.1
		n=$((n + 1))
	done
}

# Clean unmount: fusermount3 -u, the daemon exits with status 0, and its
# log holds no sanitizer report.
nrs_umount () {
	if [ -z "$NRS_PID" ]; then
		echo "nrs_umount: not mounted"
		return 1
	fi
	echo "=== $this_test: unmount" >>"$LOG"
	if ! fusermount3 -u "$MNT"; then
		echo "nrs_umount: fusermount3 -u failed (busy?)"
		return 1
	fi
	if ! nrs_wait_exit "$NRS_UMOUNT_TIMEOUT"; then
		echo "nrs_umount: nereusfs still running $NRS_UMOUNT_TIMEOUT s after the unmount"
		kill -9 "$NRS_PID"
		wait "$NRS_PID" 2>/dev/null
		nrs_forget_daemon
		nrs_show_log
		return 1
	fi
	nrs_forget_daemon
	if [ "$NRS_EXIT" != 0 ]; then
		echo "nrs_umount: nereusfs exited with status $NRS_EXIT after a clean unmount"
		nrs_show_log
		return 1
	fi
	nrs_check_sanitizer
}

nrs_remount () {
	nrs_umount && nrs_mount "$@"
}

# nrs_mount_fp SPEC [args]: mount with NRS_FAILPOINTS=SPEC (src/util/
# failpoint.c) for the daemon only.
nrs_mount_fp () {
	NRS_FAILPOINTS=$1
	export NRS_FAILPOINTS
	shift
	nrs_mount "$@"
	fp_rc=$?
	unset NRS_FAILPOINTS
	return $fp_rc
}

# kill -9 the daemon, then detach its dead mount.
nrs_kill9 () {
	if [ -z "$NRS_PID" ]; then
		echo "nrs_kill9: no daemon"
		return 1
	fi
	echo "=== $this_test: kill -9 $NRS_PID" >>"$LOG"
	kill -9 "$NRS_PID"
	wait "$NRS_PID" 2>/dev/null
	nrs_forget_daemon
	nrs_detach || { echo "nrs_kill9: cannot detach $MNT"; return 1; }
}

# A sanitizer report in the part of $LOG not checked before fails (each
# report fails one step, not every later one).
nrs_log_checked=0
nrs_check_sanitizer () {
	local total pattern='ERROR: [A-Za-z]*Sanitizer|runtime error:'
	total=$(wc -l <"$LOG")
	[ "$total" -gt "$nrs_log_checked" ] || return 0
	sed -n "$((nrs_log_checked + 1)),${total}p" "$LOG" >"$TRASH/log.new"
	nrs_log_checked=$total
	if grep -E "$pattern" "$TRASH/log.new" >/dev/null; then
		echo "sanitizer report in the daemon log:"
		grep -E -A 30 "$pattern" "$TRASH/log.new" | head -n 60 | sed 's/^/| /'
		return 1
	fi
}

# The daemon's log since the last mount.
nrs_log_since_mount () {
	awk '/^=== .*: mount/ { buf = "" } { buf = buf $0 "\n" } END { printf "%s", buf }' "$LOG"
}

# nrs_powerfail_daemon FILE JOURNAL: write FILE, an executable that runs
# the daemon ($NEREUSFS) under tests/helpers/nrs-powerfail.so, recording
# what it does in $DATA (as set when this is called) to JOURNAL; mount with
# NEREUSFS=FILE to record.  exec keeps the pid nrs_mount watches.
nrs_powerfail_daemon () {
	local so=${NRS_POWERFAIL:-$NRS_HELPERS/nrs-powerfail.so}
	[ -f "$so" ] || nrs_error "no $so (run make check)"
	cat >"$1" <<EOF
#!/bin/sh
NRS_PF_DIR='$DATA' NRS_PF_JOURNAL='$2' LD_PRELOAD='$so' \\
ASAN_OPTIONS="\${ASAN_OPTIONS:+\$ASAN_OPTIONS:}verify_asan_link_order=0" \\
exec '$NEREUSFS' "\$@"
EOF
	chmod +x "$1"
}

# nrs_cut_points SEED RECORDS CUTS [K...]: the cut points of a power-loss
# replay, sorted, each once: CUTS pseudo-random ones in 0..RECORDS-1 from
# SEED, every K (the landmarks a test took), and RECORDS (the very end).
nrs_cut_points () {
	local seed=$1 n=$2 c=$3 k
	shift 3
	{
		awk -v s="$seed" -v n="$n" -v c="$c" \
			'BEGIN { srand(s); for (i = 0; i < c && n > 0; i++) print int(rand() * n) }'
		for k in "$@"; do echo "$k"; done
		echo "$n"
	} | sort -n -u
}

# nrs_holes_hold STORE ROWS: for each "seg|off|length" line of file ROWS
# (retired adopted rows, lifecycle.c G6), the bytes [off, off + length)
# of the store's file nrs_objfmt_adopt_key(seg) under directory STORE are
# all zeros (a hole), if that file still exists (G7 may have deleted it);
# prints "# retired slices in files that stay: N".  Status 1 when one is
# not.
nrs_holes_hold () {
	python3 - "$1" "$2" <<-\PY
	import os, sys
	d, rows = sys.argv[1], sys.argv[2]
	owal = 1 << 62
	kept = 0
	for line in open(rows):
	    seg, off, length = (int(x) for x in line.split("|"))
	    if seg & owal:
	        seg &= ~owal
	        key = "owal/%06x/%010x" % (seg >> 40, seg & ((1 << 40) - 1))
	    else:
	        key = "w/%016x" % seg
	    path = os.path.join(d, key)
	    if not os.path.exists(path):
	        continue
	    kept += 1
	    with open(path, "rb") as f:
	        f.seek(off)
	        b = f.read(length)
	    if b.count(0) != len(b):
	        sys.exit("%s: bytes %d + %d of a retired row are back after the power loss"
	                 % (key, off, length))
	print("# retired slices in files that stay: %d" % kept)
	PY
}

# ---- background processes ---------------------------------------------

# nrs_bg CMD...: run CMD in the background (redirect at the call site);
# its pid is NRS_LAST_BG, and the EXIT trap kills it if still running.
nrs_bg () {
	"$@" &
	NRS_LAST_BG=$!
	NRS_BG_PIDS="$NRS_BG_PIDS $NRS_LAST_BG"
	echo "$NRS_LAST_BG" >>"$TRASH/bg.pids"
}

# nrs_wait PID [SECONDS]: its exit status; 124 (and killed) past the limit.
nrs_wait () {
	local n=0
	while kill -0 "$1" 2>/dev/null; do
		if [ $n -ge $((${2:-60} * 10)) ]; then
			echo "nrs_wait: process $1 still running after ${2:-60} s; killing it"
			kill -9 "$1" 2>/dev/null
			wait "$1" 2>/dev/null
			return 124
		fi
		sleep 0.1
		n=$((n + 1))
	done
	wait "$1"
}

# ---- assertions -------------------------------------------------------

test_cmp () {
	diff -u "$1" "$2"
}

# The command fails (exit 1..125), not by a signal or by not being found.
test_must_fail () {
	local rc
	"$@"
	rc=$?
	if [ $rc -eq 0 ]; then
		echo "test_must_fail: command succeeded: $*"
		return 1
	elif [ $rc -gt 125 ]; then
		echo "test_must_fail: command died or was not found ($rc): $*"
		return 1
	fi
	return 0
}

# expect_errno ERRNO[|ERRNO...] OP ARG...: one nrs-syscalls step.
expect_errno () {
	local want="$1"
	shift
	nrs-syscalls expect "$want" "$@"
}

# nrs_wait_for SECONDS COMMAND...: run COMMAND every 0.1 s until it
# succeeds; fail (saying what) after SECONDS.
nrs_wait_for () {
	local n=0 limit=$(($1 * 10))
	shift
	until "$@"; do
		[ $n -lt $limit ] || { echo "nrs_wait_for: still not: $*"; return 1; }
		sleep 0.1; n=$((n + 1))
	done
}

# nrs_metric NAME: the value of nereus_NAME in /.nereus/metrics.
nrs_metric () {
	sed -n "s/^nereus_$1 //p" "$MNT/.nereus/metrics"
}

# nrs_objects: how many segment objects the embedded store holds (not the
# metadata checkpoints, ckpt/).
nrs_objects () {
	find "$DATA/objects" \( -path "$DATA/objects/.tmp" -o \
		-path "$DATA/objects/ckpt" \) -prune -o -type f -print | wc -l
}

# The raw value of xattr NAME of FILE (no newline added).
nrs_xattr () {
	getfattr --absolute-names --only-values -n "$2" -- "$1"
}

# nrs_materialized FILE: everything FILE holds is in objects
# (user.nereus.materialized has reached user.nereus.head); for
# nrs_wait_for.
nrs_materialized () {
	[ "$(nrs_xattr "$1" user.nereus.materialized)" = "$(nrs_xattr "$1" user.nereus.head)" ]
}

# nrs_settled FILE SMALL: compaction's fixpoint (compaction.c CP1) on
# FILE: no two neighbouring copied objects (the index's obj: lines, not
# adopt: ones) are both smaller than SMALL bytes, and FILE is materialized.
nrs_settled () {
	nrs_xattr "$1" user.nereus.index | grep " obj:" | awk -v small="$2" '
		{ is_small = $2 - $1 < small }
		is_small && prev_small && $1 == prev_end { pairs++ }
		{ prev_small = is_small; prev_end = $2 }
		END { exit pairs > 0 }' && nrs_materialized "$1"
}

# nrs_all_adopted KIND FILE...: every FILE's index names adopted records
# of KIND (w/: local WAL segments; owal/: WAL-object slices) and nothing
# else; prints the index that is not.
nrs_all_adopted () {
	local kind=$1 f
	shift
	for f in "$@"; do
		nrs_xattr "$f" user.nereus.index >"$TRASH/index" || return 1
		grep -q " adopt:$kind" "$TRASH/index" || { cat "$TRASH/index"; return 1; }
		if grep -v " adopt:$kind" "$TRASH/index" | grep -q .; then
			cat "$TRASH/index"; return 1
		fi
	done
}

# I4 for each FILE: st_size == user.nereus.head.
nrs_check_head () {
	local f s h
	for f in "$@"; do
		s=$(stat -c %s -- "$f") && h=$(nrs_xattr "$f" user.nereus.head) || return 1
		if [ "$s" != "$h" ]; then
			echo "I4: $f: st_size $s but user.nereus.head $h"
			return 1
		fi
	done
}

# nrs_verify_records NRS-VERIFY-ARGS...: run nrs-verify (tests/helpers:
# record by record, against the ack logs) and print its report; then, for
# every stream it reports, I4 (st_size == user.nereus.head) and version ==
# records (the writers of nrs-appender make one append per record).  Call
# it when no append is in flight.
nrs_verify_records () {
	local rc word path counts records v
	nrs-verify "$@" >"$TRASH/verify.out"
	rc=$?
	cat "$TRASH/verify.out"
	[ $rc -eq 0 ] || return 1
	while read -r word path counts; do
		[ "$word" = stream ] || continue
		nrs_check_head "$path" || return 1
		records=$(echo "$counts" | sed -n "s/^records=\\([0-9]*\\) .*/\\1/p")
		v=$(nrs_xattr "$path" user.nereus.version) || return 1
		if [ "$v" != "$records" ]; then
			echo "$path: version $v, but $records records (one append each)"
			return 1
		fi
	done <"$TRASH/verify.out"
}

# nrs_other_fs: make a private directory on another file system than
# $DATA's (/dev/shm, a tmpfs on Linux), removed when the script ends, and
# print its path; fails if it is on the same st_dev after all.
nrs_other_fs () {
	local d=/dev/shm/nrs-$this_test.$$
	mkdir -m 700 "$d" || return 1
	nrs_at_exit "rm -rf $d"
	if [ "$(stat -c %d "$d")" = "$(stat -c %d "$DATA")" ]; then
		echo "nrs_other_fs: $d is on the file system of $DATA" >&2
		return 1
	fi
	echo "$d"
}

# ---- damage and nereusfs-fsck ----------------------------------------

# fsck_expect STATUS DIR [--repair] -- PATTERN...: nereusfs-fsck exits with
# STATUS and prints every PATTERN (fixed strings); its output is in
# $TRASH/fsck.out.
fsck_expect () {
	local want=$1 dir=$2 rc
	shift 2
	args=
	while [ "$1" != -- ]; do args="$args $1"; shift; done
	shift
	"${NRS_FSCK:-$nrs_top/nereusfs-fsck}" $args "$dir" >"$TRASH/fsck.out" 2>&1
	rc=$?
	sed 's/^/| /' "$TRASH/fsck.out"
	if [ "$rc" != "$want" ]; then
		echo "nereusfs-fsck exited $rc, expected $want"
		return 1
	fi
	for p in "$@"; do
		grep -F -e "$p" "$TRASH/fsck.out" >/dev/null ||
			{ echo "missing in the output: $p"; return 1; }
	done
}

# reseal DB: give every stream row the checksum of what it holds now
# (src/meta/sqlite_crc.c, ROW CHECKSUM), so that a row changed with sqlite3 is
# wrong but whole, as a bug would leave it, not damaged on disk (F27).
reseal () {
	python3 - "$1" <<-\EOF
	import sqlite3, struct, sys
	def crc32c(data):
	    crc = 0xFFFFFFFF
	    for b in data:
	        crc ^= b
	        for _ in range(8):
	            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
	    return crc ^ 0xFFFFFFFF
	db = sqlite3.connect(sys.argv[1])
	for row in db.execute("SELECT id, ino, head, version, start, epoch,"
	                      " last_lsn, profile, unlinked FROM streams").fetchall():
	    crc = crc32c(b"".join(struct.pack("<q", v) for v in row))
	    db.execute("UPDATE streams SET crc = ? WHERE id = ?", (crc, row[0]))
	db.commit()
	EOF
}

# ---- steps ------------------------------------------------------------

test_count=0
test_failures=0

# Run after every step: the daemon that should be running still is, and
# nothing was reported by a sanitizer.
nrs_post_check () {
	if [ -n "$NRS_PID" ] && ! kill -0 "$NRS_PID" 2>/dev/null; then
		wait "$NRS_PID"
		echo "nereusfs (pid $NRS_PID) died during this step, status $?"
		nrs_forget_daemon
		nrs_detach
		return 1
	fi
	nrs_check_sanitizer
}

# The body runs in a function of its own, so "|| return 1" in a loop fails
# the step (as in git's tests).
nrs_eval_body () {
	eval "$nrs_body"
}

test_expect_success () {
	nrs_desc=$1
	nrs_body=$2
	test_count=$((test_count + 1))
	nrs_set_timeout
	echo "# --- $test_count: $nrs_desc"
	# The step's output goes through a file (appended: a process it
	# leaves running may still write), shown once the step ends, or by
	# nrs_cleanup if the script dies in it.
	: >"$TRASH/step.out"
	nrs_in_step=1
	nrs_eval_body >>"$TRASH/step.out" 2>&1
	nrs_rc=$?
	if [ $nrs_rc -eq 0 ]; then
		nrs_post_check >>"$TRASH/step.out" 2>&1 || nrs_rc=$?
	fi
	nrs_in_step=0
	cat "$TRASH/step.out"
	if [ $nrs_rc -eq 0 ]; then
		echo "ok $test_count - $nrs_desc"
	else
		test_failures=$((test_failures + 1))
		[ -f "$TRASH/first-failure" ] ||
			{ echo "first failed step: $test_count - $nrs_desc"
			  tail -n 25 "$TRASH/step.out"; } >"$TRASH/first-failure"
		echo "not ok $test_count - $nrs_desc (status $nrs_rc)"
		echo "$nrs_body" | sed 's/^/#	/'
		nrs_show_log
	fi
}

# A failing script ends by repeating the end of what its first failed
# step printed: a CI report that keeps only the tail of a long log still
# says why.
test_done () {
	echo "1..$test_count"
	if [ $test_failures -ne 0 ]; then
		sed 's/^/# /' "$TRASH/first-failure" 2>/dev/null
		echo "# $this_test: failed $test_failures of $test_count"
		exit 1
	fi
	echo "# $this_test: passed all $test_count"
	exit 0
}
