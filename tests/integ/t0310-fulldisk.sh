#!/bin/sh
test_description='full disk: appends fail ENOSPC, nothing acknowledged is lost, reads go on, appends resume when space returns'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# The data directory lives on an 16 MiB tmpfs (smallfs.sh), which also
# holds a 2 MiB filler file: deleting it is "space returns".
. "$nrs_lib/smallfs.sh"
streams="$MNT/f/a $MNT/f/b"

# The WAL is not the only writer on a full disk: SQLite must still publish
# the heads of records the WAL holds.  So the WAL leaves a reserve of free
# space (-o wal_reserve; WA5 in wal_local_append.c), sized here for SQLite's own
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

test_expect_success 'a 16 MiB tmpfs with a 2 MiB filler holds the data directory' '
	smallfs_mount 16m nrs-fulldisk &&
	dd if=/dev/zero of="$SMALL/filler" bs=1M count=2 status=none &&
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
