#!/bin/sh
test_description='full disk: appends fail ENOSPC, nothing acknowledged is lost, reads go on, appends resume when space returns'
. "${NRS_TESTLIB:-$(dirname "$0")/lib.sh}"

# The data directory lives on an 16 MiB tmpfs mounted at $SMALL, which also
# holds a 2 MiB filler file: deleting it is "space returns".  lib.sh's EXIT
# trap removes $TRASH with --one-file-system, so it would leave the tmpfs
# mounted: our own trap stops the daemon and unmounts the tmpfs first, then
# hands over to lib.sh's (with the script's exit status).
SMALL=$TRASH/small
streams="$MNT/f/a $MNT/f/b"

# The WAL is not the only writer on a full disk: SQLite must still publish
# the heads of records the WAL holds.  So the WAL leaves a reserve of free
# space (-o wal_reserve; A5 in wal_local.c), sized here for SQLite's own
# WAL (up to ~4 MiB between checkpoints): the appends fail ENOSPC before
# the metadata store runs out, and the pipeline never fails.
RESERVE=6291456
# This test is about the WAL on a full disk.  The embedded object store
# shares the disk, and materialized bytes are held twice until their WAL
# segment is sealed and reclaimed (README, Limits): materialization here
# would race the appenders for the space the filler frees.  So it is held
# off (t0520 covers the budget, the object side's ENOSPC).
OPTS="wal_reserve=$RESERVE,materialize_bytes=1073741824,materialize_age_ms=3600000"
pipeline_failed () {
	grep -q "^nereus_pipeline_failed 1\$" "$MNT/.nereus/metrics"
}
acks=

command -v mount >/dev/null && command -v umount >/dev/null ||
	nrs_error "mount/umount missing"

small_is_mounted () {
	awk -v m="$SMALL" '$5 == m { found = 1 } END { exit !found }' \
		/proc/self/mountinfo
}

fulldisk_cleanup () {
	fd_rc=$?
	set +e
	if [ -n "$NRS_PID" ] && kill -0 "$NRS_PID" 2>/dev/null; then
		fusermount3 -u "$MNT" 2>/dev/null
		nrs_wait_exit 10 || kill -9 "$NRS_PID" 2>/dev/null
		wait "$NRS_PID" 2>/dev/null
		nrs_forget_daemon
	fi
	nrs_detach
	if small_is_mounted; then
		umount "$SMALL" 2>/dev/null || umount -l "$SMALL"
	fi
	(exit $fd_rc)
	nrs_cleanup
}
trap fulldisk_cleanup EXIT

test_expect_success 'a 16 MiB tmpfs with a 2 MiB filler holds the data directory' '
	mkdir "$SMALL" &&
	mount -t tmpfs -o size=16m,mode=0700 nrs-fulldisk "$SMALL" &&
	dd if=/dev/zero of="$SMALL/filler" bs=1M count=2 status=none &&
	DATA=$SMALL/data &&
	mkdir -m 700 "$DATA" &&
	nrs_mount -o "$OPTS" &&
	mkdir "$MNT/f" &&
	for s in $streams; do : >>"$s" || return 1; done
'

test_expect_success 'append until the disk is full: the writers fail ENOSPC' '
	{ nrs-appender -t 4 -d 60 -s 33-65536 -w 100 -a "$TRASH/ack.fill" \
		$streams >"$TRASH/app.fill" 2>&1; arc=$?; } &&
	acks="-a $TRASH/ack.fill" &&
	cat "$TRASH/app.fill" &&
	df -k "$SMALL" &&
	echo "$(wc -l <"$TRASH/ack.fill") records acknowledged" &&
	test "$arc" = 3 &&
	grep -q ENOSPC "$TRASH/app.fill" &&
	! pipeline_failed &&
	test "$(wc -l <"$TRASH/ack.fill")" -gt 50
'

test_expect_success 'still full: another append fails; everything acknowledged reads back intact' '
	expect_errno ENOSPC writen "$MNT/f/a" 200000 &&
	! pipeline_failed &&
	nrs_verify_records -c -u 0 $acks $streams &&
	cat $streams >/dev/null
'

test_expect_success 'space returns: appends resume, and survive a remount' '
	rm "$SMALL/filler" &&
	unacked=0 &&
	nrs-appender -t 4 -n 20 -s 33-8192 -w 200 -a "$TRASH/ack.after" $streams &&
	acks="$acks -a $TRASH/ack.after" &&
	nrs_verify_records -c -u $unacked $acks $streams &&
	nrs_remount -o "$OPTS" &&
	nrs_verify_records -c -u $unacked $acks $streams
'

test_expect_success 'unmount, and the tmpfs' '
	nrs_umount &&
	umount "$SMALL" &&
	! small_is_mounted
'

test_done
