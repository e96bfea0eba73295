#!/bin/sh
test_description='without -f: nereusfs detaches, reports the mount in its exit status, and serves appends'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# The detached daemon is not our child (and the init here may not reap
# it): it is gone when its /proc entry is gone or a zombie.
daemon_alive () {
	[ -r "/proc/$1/stat" ] && ! awk '{ exit $3 != "Z" }' "/proc/$1/stat"
}

test_expect_success 'nereusfs MOUNTPOINT returns 0 once mounted' '
	"$NEREUSFS" -o "data=$DATA" "$MNT" 2>"$TRASH/start.err" &&
	nrs_is_mounted &&
	NRS_PID=$(pgrep -f -- "data=$DATA" | head -n 1) &&
	test -n "$NRS_PID" &&
	echo "$NRS_PID" >"$TRASH/daemon.pid"
'

# A fork keeps only the forking thread: the commit pipeline's threads must
# start after the detach, or appends would wait for ever.
test_expect_success 'appends, reads and xattrs work in the detached daemon' '
	mkdir -p "$MNT/kafka/orders" &&
	timeout 10 sh -c "printf batch-1 >>\"$MNT/kafka/orders/p0\"" &&
	timeout 10 sh -c "printf batch-2 >>\"$MNT/kafka/orders/p0\"" &&
	test "$(cat "$MNT/kafka/orders/p0")" = batch-1batch-2 &&
	test "$(nrs_xattr "$MNT/kafka/orders/p0" user.nereus.version)" = 2
'

test_expect_success 'fusermount3 -u stops it' '
	fusermount3 -u "$MNT" &&
	n=0 &&
	while daemon_alive "$NRS_PID" && [ $n -lt 100 ]; do
		sleep 0.1; n=$((n + 1))
	done &&
	! daemon_alive "$NRS_PID" &&
	nrs_forget_daemon &&
	! nrs_is_mounted
'

test_expect_success 'a start that fails exits non-zero and says why' '
	test_must_fail "$NEREUSFS" -o "data=/proc/nereusfs-no-such-dir" "$MNT" \
		2>"$TRASH/err" &&
	grep "cannot create data directory" "$TRASH/err" &&
	! nrs_is_mounted &&
	test_must_fail "$NEREUSFS" -o "data=$DATA" "$TRASH/no-such-mountpoint" \
		2>"$TRASH/err2" &&
	! nrs_is_mounted
'

test_expect_success 'the data survives, in the foreground daemon too' '
	nrs_mount &&
	test "$(cat "$MNT/kafka/orders/p0")" = batch-1batch-2 &&
	nrs_umount
'

test_done
