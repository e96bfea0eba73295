#!/bin/sh
test_description='write once for object-wal streams under kill -9: a crash at each step of adoption (mat_adopt.c MZ13), of the object WAL reclaim (wal_object_gc.c OW7, OW18) and of the punches and deletes of adopted slices (lifecycle.c G9, G7) loses no acknowledged byte, fsck stays clean and the space comes back'
# t0504 adopts WAL objects that each hold one record; here each holds
# several, of two streams: a keeps every byte, t has retention.bytes=1, so
# its trims punch slices out of WAL objects a still reads from.
NRS_TEST_TIMEOUT=${NRS_TEST_TIMEOUT:-600}
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

NRS_MOUNT_TIMEOUT=${NRS_MOUNT_TIMEOUT_OWAL:-90}

seed=$(od -An -N4 -tu4 /dev/urandom | tr -d " ")
echo "# seed $seed"

# As t0504, and WAL objects of up to 4 MiB that linger 50 ms for more
# appends, so that the writers of a and t share them.
B=$TRASH/bucket
mkdir -m 700 "$B"
WO="write_once=auto,objects=$B,compact_size=0,materialize_age_ms=200,checkpoint_ms=300,gc_grace_ms=500,object_wal_timeout_ms=20000,owner_lease_ms=4000,object_wal_bytes=4194304,object_wal_linger_ms=50"
K=$MNT/k
A=$K/a			# kept whole: its acknowledged records checked
T=$K/t			# retention.bytes=1: its slices punched
C=$K/c			# small records, copied: WAL objects with no slice
acks=			# "-a FILE" for every ack log of a and c

alive () {
	kill -0 "$NRS_PID" 2>/dev/null
}

dead () {
	! alive
}

# Every acknowledged record of a and c there, whole, once, in order (I1,
# I3: at most one unacknowledged record per writer, the one a crash cut
# short); t's records whole and in order from the second range of its
# index (retention cuts at a multiple of 4096 inside the first, a record
# starts each other: each is one adopted record).
# t is read once t_trimmed: a read below a start that a trim raised
# meanwhile fails ENODATA.
verify_kept () {
	nrs_verify_records -u 1 $acks "$A" "$C"
}

verify_all () {
	verify_kept &&
	nrs_check_head "$T" &&
	s=$(nrs_xattr "$T" user.nereus.index | sed -n "2s/ .*//p") &&
	if test -n "$s"; then nrs-verify -s "$s" "$T"; fi
}

# t's slices punched or gone: at most its last two records in the rows
# (retention cuts inside the one below the last, and no further).
t_trimmed () {
	test "$(nrs_xattr "$T" user.nereus.index | grep -c " adopt:owal/")" -le 2
}

test_expect_success 'object-wal streams; t keeps 1 byte' '
	nrs_mount -o "$WO" &&
	mkdir "$K" &&
	setfattr -n user.nereus.profile -v object-wal "$K" &&
	: >"$A" && : >"$T" && : >"$C" &&
	setfattr -n user.nereus.retention.bytes -v 1 "$T" &&
	nrs_umount
'

# A crash between the object WAL's floor and its DELETEs (or between two
# DELETEs: they go highest first) leaves WAL objects below the floor not
# yet deleted, which no scan reads; their DELETEs are owed, recorded in
# DATA/owal/gc before the floor (wal_object_gc.c OWG3), and the remount's
# first reclaim sends them again and removes the record.  Not only
# owal.before_delete and owal.after_delete land there: a crash at any
# point of another thread may (seen after gc.before_delete).  So once the
# record is gone, nereusfs-fsck finds no WAL object left below the floor
# (F32): every owed one was deleted.  Every object a generation names
# stays for lifecycle.c G7 (OW18), never owed.
owed_sent () {
	! test -e "$DATA/owal/gc"
}

# cycle POINT HIT TAG WID: mount with POINT armed to crash at its HIT-th
# hit; 2 writers on a and 2 on t append records of 256 KiB-1 MiB at once
# (so that WAL objects hold records of both), then 1 writer small records
# on c (WAL objects no generation names, deleted by the object WAL), then
# 1 writer on u, unlinked (WAL objects only u names, G7 deletes them); the
# daemon must die at POINT within 40 s of that; then remount, verify.
cycle () {
	local pa pt arc trc
	acks="$acks -a $TRASH/ack.a.$3 -a $TRASH/ack.c.$3"
	nrs_mount_fp "$1=crash@$2" -o "$WO" &&
	nrs_bg nrs-appender -t 2 -n 6 -s 262144-1048576 -w $4 -S $((seed + $4)) \
		-a "$TRASH/ack.a.$3" "$A" >"$TRASH/app.a.$3" 2>&1 &&
	pa=$NRS_LAST_BG &&
	nrs_bg nrs-appender -t 2 -n 6 -s 262144-1048576 -w $(($4 + 10)) \
		-S $((seed + $4 + 10)) -a "$TRASH/ack.t.$3" "$T" \
		>"$TRASH/app.t.$3" 2>&1 &&
	pt=$NRS_LAST_BG &&
	{ nrs_wait $pa 60; arc=$?; } &&
	{ nrs_wait $pt 60; trc=$?; } &&
	echo "appenders exit $arc $trc" &&
	case "$arc$trc" in 00|03|30|33) ;; *) false ;; esac &&
	if alive; then
		nrs-appender -t 1 -n 40 -s 33-4096 -w $(($4 + 20)) \
			-a "$TRASH/ack.c.$3" "$C" || alive || true
	else
		: >"$TRASH/ack.c.$3"
	fi &&
	if alive; then
		nrs-appender -t 1 -n 3 -s 262144-1048576 -w $(($4 + 30)) \
			"$K/u.$3" && rm "$K/u.$3" || alive || true
	fi &&
	nrs_wait_for 40 dead &&
	grep "failpoint $1: crash at hit $2\$" "$LOG" &&
	nrs_kill9 &&
	nrs_mount -o "$WO" &&
	verify_kept &&
	nrs_wait_for 60 t_trimmed &&
	verify_all &&
	nrs_wait_for 60 owed_sent &&
	nrs_umount &&
	fsck_expect 0 "$DATA" --objects="$B" -- &&
	! grep -q "F25\|F26\|F32" "$TRASH/fsck.out"
}

# Not gc.after_delete: in 4 of 7 runs no lifecycle DELETE came within 40 s
# of the writes (u's unlink included), so that cycle would be flaky.
wid=100
for spec in obj.before_publish@2 obj.after_publish@2 \
	    owal.before_floor@3 owal.before_delete@2 owal.after_delete@2 \
	    gc.before_delete@3; do
	wid=$((wid + 100))
	point=${spec%@*}
	hit=${spec#*@}
	test_expect_success "crash at $point (hit $hit) amid adoptions and punches: every acknowledged byte, fsck clean" '
		cycle $point $hit $point $wid ||
		{ nrs_kill9; false; }
	'
done

# KiB of the WAL objects in the store
owal_kib () {
	du -sk "$B/owal" | cut -f1
}

# KiB the rows of a and t name (their adopted slices)
live_kib () {
	echo $((($(stat -c %s "$A") + $(stat -c %s "$T") - $(nrs_xattr "$T" user.nereus.start)) / 1024))
}

# Once settled the WAL objects hold the live slices and at most BOUND KiB
# more: each WAL object's runs' markers and seals, the blocks a punched
# slice shares with its neighbours (2 a slice, 4 KiB each); no WAL object
# a crash left below the floor (OWG3: each remount deleted them).
settled () {
	kib=$(owal_kib) && live=$(live_kib) &&
	test "$kib" -le $((live + BOUND))
}

test_expect_success 'the space of the punched slices comes back' '
	nrs_mount -o "$WO" &&
	BOUND=$((4096 + 8 * $(nrs_xattr "$T" user.nereus.version))) &&
	{ nrs_wait_for 60 settled; rc=$?; } &&
	echo "owal: $kib KiB, live slices $live KiB, bound $BOUND KiB" &&
	test $rc = 0 &&
	verify_all
'

test_expect_success 'unlinked, the streams give back their WAL objects' '
	rm "$A" "$T" "$C" &&
	nrs_wait_for 60 sh -c "test \$(du -sk $B/owal | cut -f1) -le 4096" &&
	echo "owal: $(owal_kib) KiB" &&
	nrs_umount &&
	fsck_expect 0 "$DATA" --objects="$B" -- &&
	! grep -q "F32\|F25\|F26" "$TRASH/fsck.out"
'

test_done
