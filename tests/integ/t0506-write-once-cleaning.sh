#!/bin/sh
test_description='write once: an adopted file less than a quarter live has its live records copied out, and goes (cleaning.c CL1-CL3, compaction.c CP3)'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# Two streams written in turn, 1 MiB records in 8 MiB segments (7 records
# each): a gets 6 records, then b 1, four times, then a 7 more.  They are
# written with materialization held off (HOLD: nothing is due, so no
# segment is sealed early, mat_adopt.c MZ10), so the segments rotate only
# when full and each of the first four holds six of a's records and one
# of b's; the remount then adopts them all.  Retention then trims all of
# a: every file is left with one of b's records, a seventh of it, and
# cleaning copies them into b's own objects; GC then punches the old
# generations and deletes the files (lifecycle.c G6, G7).
OPTS="write_once=auto,wal_segment_size=8388608,materialize_age_ms=200,gc_grace_ms=300"
HOLD="write_once=auto,wal_segment_size=8388608,materialize_age_ms=3600000,materialize_bytes=1073741824"
MIB=1048576
A=$MNT/a
B=$MNT/b

wal_left () {
	nrs_xattr "$1" user.nereus.index | grep -q "wal:"
}
adopted_all () {
	! wal_left "$A" && ! wal_left "$B"
}
wal_drained () {
	test "$(find "$DATA/wal" -name '*.seg' | wc -l)" -le 1
}
w_files () {
	find "$DATA/objects/w" -type f 2>/dev/null | wc -l
}
cleaned () {
	[ "$(w_files)" = 0 ] &&
	! nrs_xattr "$B" user.nereus.index | grep -q " adopt:" &&
	[ "$(nrs_metric gc_draining_bytes)" = 0 ]
}

test_expect_success 'b among a: every record adopted' '
	nrs_mount -o "$HOLD" &&
	for r in 1 2 3 4; do
		nrs-appender -t 1 -n 6 -s $MIB -a "$TRASH/a.$r" "$A" &&
		nrs-appender -t 1 -n 1 -s $MIB -a "$TRASH/b.$r" "$B" || return 1
	done &&
	nrs-appender -t 1 -n 7 -s $MIB -a "$TRASH/a.5" "$A" &&
	nrs_remount -o "$OPTS" &&
	nrs_wait_for 60 adopted_all &&
	nrs_wait_for 60 wal_drained &&
	nrs_xattr "$B" user.nereus.index | sed "s/^/# b: /" &&
	test "$(nrs_xattr "$B" user.nereus.index | grep -c " adopt:w/")" -eq 4 &&
	test "$(nrs_xattr "$B" user.nereus.index | cut -d: -f2 | sort -u | wc -l)" -eq 4 &&
	test "$(w_files)" -ge 4 &&
	! grep "cleaning: adopted segment" "$LOG" &&
	cat "$B" >"$TRASH/b.before"
'

test_expect_success 'retention trims a: the files are cleaned and go' '
	c0=$(nrs_metric compactions_total) &&
	setfattr -n user.nereus.retention.ms -v 1 "$A" &&
	{ nrs_wait_for 90 cleaned ||
	  { find "$DATA/objects/w" -type f | sed "s/^/# left: /";
	    nrs_xattr "$B" user.nereus.index | sed "s/^/# b: /"; false; }; } &&
	test "$(nrs_metric compactions_total)" -ge $((c0 + 4)) &&
	nrs_xattr "$B" user.nereus.index | sed "s/^/# b: /" &&
	grep "cleaning: adopted segment" "$LOG" | sed "s/^/# /" &&
	cmp "$TRASH/b.before" "$B"
'

test_expect_success 'remount: b the same, byte for byte' '
	nrs_umount &&
	nrs_mount -o "$OPTS" &&
	cmp "$TRASH/b.before" "$B" &&
	test "$(w_files)" = 0 &&
	nrs_umount
'

test_done
