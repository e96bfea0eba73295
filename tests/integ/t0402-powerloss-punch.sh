#!/bin/sh
test_description='write once: the holes GC punches in adopted files survive a power loss (lifecycle.c G8, objstore_dir_adopt.c OD9)'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# The daemon runs under nrs-powerfail.so (tests/helpers/nrs-powerfail.c),
# which journals every write, punch and sync in $DATA.  One stream of
# 1 MiB records in 8 MiB segments is adopted in place; a trim frees its
# first records, and GC (G6) punches them out of the first file, which
# stays (its later records are live).  After a clean unmount, the disk the
# journal's syncs made durable (nrs-powerreplay, PR1 and PR6: an unsynced
# punch is lost) must have a hole wherever a retired row says bytes were
# freed: the row is retired only after the file's sync (G8).
WO="-o write_once=auto -o wal_segment_size=8388608 -o compact_size=0 -o materialize_age_ms=200 -o gc_grace_ms=300"
MIB=1048576
S=$MNT/s
journal=$TRASH/journal
real_daemon=$NEREUSFS

nrs_powerfail_daemon "$TRASH/nereusfs-pf" "$journal"

no_wal_left () {
	! nrs_xattr "$S" user.nereus.index | grep -q "wal:"
}
wal_drained () {
	test "$(find "$DATA/wal" -name '*.seg' | wc -l)" -le 1
}
retired_done () {
	[ "$(nrs_metric gc_deleted_objects_total)" -ge 3 ] &&
	[ "$(nrs_metric gc_draining_bytes)" = 0 ]
}

test_expect_success 'recorded: adopted records, a trim, GC punches them' '
	NEREUSFS=$TRASH/nereusfs-pf &&
	nrs_mount $WO &&
	NEREUSFS=$real_daemon &&
	nrs-appender -t 1 -n 20 -s $MIB -a "$TRASH/ack" "$S" &&
	nrs_wait_for 60 no_wal_left &&
	nrs_wait_for 60 wal_drained &&
	setfattr -n user.nereus.trim -v $((4 * MIB)) "$S" &&
	nrs_wait_for 60 retired_done
'

test_expect_success 'the live records still read back' '
	tail -c +$((4 * MIB + 1)) "$S" >"$TRASH/live" &&
	test -s "$TRASH/live" &&
	nrs_umount
'

# PR3: the cut after the last record: what every sync made durable
test_expect_success 'replayed: every retired adopted record is a hole in a file that stays' '
	nrs-powerreplay "$journal" "$(nrs-powerreplay -c "$journal")" "$TRASH/cut" &&
	sqlite3 "$TRASH/cut/meta.db" \
		"SELECT seg, off, length FROM objects WHERE state = 4 AND seg > 0" \
		>"$TRASH/retired" &&
	sed "s/^/# retired: /" "$TRASH/retired" &&
	test -s "$TRASH/retired" &&
	nrs_holes_hold "$TRASH/cut/objects" "$TRASH/retired" >"$TRASH/holes" &&
	cat "$TRASH/holes" &&
	! grep -q "stay: 0$" "$TRASH/holes"
'

test_expect_success 'the replayed directory mounts, the live bytes the same' '
	rm -rf "$DATA" &&
	mv "$TRASH/cut" "$DATA" &&
	nrs_mount $WO &&
	tail -c +$((4 * MIB + 1)) "$S" >"$TRASH/live.after" &&
	cmp "$TRASH/live" "$TRASH/live.after" &&
	nrs_umount
'

test_done
