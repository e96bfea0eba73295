# owalgc.sh - GC of the object WAL never deletes a slice that is needed
# (issue 15), run once per object store provider: sourced by
# t0740-owalgc-dir.sh and t0741-owalgc-s3.sh after lib.sh and the
# provider's file (dirstore.sh, s3.sh: OBJ_OPTS), with GC_OPTS naming the
# store (the embedded one in a directory apart, so that the data directory
# can be lost).
#
# What it checks: the object WAL is given objects of three kinds, in log
# order: slices of a stream BIG alone, which materialize (BIG gets far
# more than materialize_bytes); slices of BIG and of a small stream S side
# by side; slices of S alone, which never materialize (S stays below
# materialize_bytes, materialize_age_ms is an hour).  Then a mount that
# materializes and collects is killed (a crash failpoint) at each step of
# a WAL-object reclaim -- walgc.c's wal.before_reclaim, then
# wal_object_gc.c's owal.before_floor (grace over, OWG1, nothing
# recorded), owal.before_delete (the floor recorded, OW7, the Nth DELETE
# not sent) and owal.after_delete (the Nth object gone; a reclaim deletes
# the highest first, so a GC that went past S's first slice would hit an
# object S needs).  After each crash a remount with materialization held
# off reads every acknowledged append byte-exact, S's wholly from the WAL
# objects; S is then unlinked, so that its objects are reclaimable at the
# next step.  Last, the host is lost: a recovery from the bucket alone
# (the checkpoint and the WAL objects GC left, walgc.c MZ8) brings back
# every acknowledged append.  With GC_FSCK (the embedded store),
# nereusfs-fsck finds no WAL object the crashes left below the floor
# (F32): the remounts sent the DELETEs owed (wal_object_gc.c OWG3).

. "$nrs_lib/objlib.sh"

# A mount scans every WAL object not yet reclaimed (OW8).
NRS_MOUNT_TIMEOUT=${NRS_MOUNT_TIMEOUT_OWAL:-90}

# GC: BIG materializes 64 KiB at a time, S never; checkpoints every 300
# ms cover what went (MZ8); a WAL object goes 1 s after a reclaim found
# it reclaimable (OWG1).  The lease (4 s: renewals every 1.3 s, OR1) is
# long enough for a renewal against s3rver on a loaded machine under ASan;
# at 1 s a slow renewal closed the ack window (OR3) mid-run and appends
# failed ESTALE.  Only the host-loss step at the end waits it out (OR5).
GC="materialize_bytes=65536,materialize_age_ms=3600000,object_size=262144,compact_size=0,checkpoint_ms=300,gc_grace_ms=1000,object_wal_timeout_ms=20000,owner_lease_ms=4000$GC_OPTS"
# HOLD: nothing materializes, nothing of the object WAL goes (the default
# grace is a minute): reads of object-wal ranges come from WAL objects.
HOLD="materialize_age_ms=3600000,materialize_bytes=1099511627776,object_wal_timeout_ms=20000,owner_lease_ms=4000$GC_OPTS"
K=$MNT/kafka
BIG=$K/big
big_acks=

daemon_gone () { ! kill -0 "$NRS_PID" 2>/dev/null; }
# What a wait for a crash that did not come found.
gc_seen () {
	cat "$MNT/.nereus/status"
	grep "^nereus_\(wal_reclaimed\|object_wal_held\|checkpoints_total\)" \
		"$MNT/.nereus/metrics"
}

test_expect_success 'an object-wal directory' '
	nrs_mount -o "$HOLD" &&
	mkdir "$K" &&
	setfattr -n user.nereus.profile -v object-wal "$K" &&
	: >"$BIG" &&
	nrs_umount
'

# OWG3: the DELETEs a crash left owed are sent (the record goes) by the
# remount's first reclaim
owed_sent () {
	! test -e "$DATA/owal/gc"
}

# POINT@HIT: the crash; w: the writers' first id
w=100
for step in wal.before_reclaim@2 owal.before_floor@1 owal.before_delete@1 \
	    owal.before_delete@3 owal.after_delete@2; do
	point=${step%@*}
	hit=${step#*@}
	w=$((w + 10))
	n=$w
	big_acks="$big_acks -a $TRASH/ack.big.$n -a $TRASH/ack.bigb.$n"
	test_expect_success "crash at $point (hit $hit): every acknowledged append, read back" '
		nrs_mount -o "$HOLD" &&
		nrs-appender -t 2 -n 60 -s 33-9000 -w $w \
			-a "$TRASH/ack.big.$n" "$BIG" &&
		nrs_bg nrs-appender -t 2 -n 60 -s 33-9000 -w $((w + 2)) \
			-a "$TRASH/ack.bigb.$n" "$BIG" >"$TRASH/app.big.$n" 2>&1 &&
		big=$NRS_LAST_BG &&
		nrs-appender -t 1 -n 60 -s 33-150 -w $((w + 5)) \
			-a "$TRASH/ack.s.$n" "$K/s.$n" &&
		nrs_wait $big 60 &&
		nrs-appender -t 1 -n 20 -s 33-150 -w $((w + 6)) \
			-a "$TRASH/ack.st.$n" "$K/s.$n" &&
		nrs_umount &&
		NRS_FAILPOINTS="$point=crash@$hit" &&
		export NRS_FAILPOINTS &&
		nrs_mount -o "$GC" &&
		unset NRS_FAILPOINTS &&
		{ nrs_wait_for 60 daemon_gone || { gc_seen; false; }; } &&
		nrs_kill9 &&
		grep "failpoint $point: crash at hit $hit\$" "$LOG" &&
		nrs_mount -o "$HOLD" &&
		nrs_verify_records -c $big_acks "$BIG" &&
		nrs_verify_records -c -a "$TRASH/ack.s.$n" -a "$TRASH/ack.st.$n" "$K/s.$n" &&
		test "$(nrs_xattr "$K/s.$n" user.nereus.materialized)" = 0 &&
		nrs_xattr "$K/s.$n" user.nereus.index | grep -q " walobj:" &&
		nrs_xattr "$BIG" user.nereus.index | grep -q " obj:" &&
		if [ "$point" != owal.after_delete ]; then rm "$K/s.$n"; fi &&
		nrs_wait_for 60 owed_sent &&
		nrs_umount
	'
done
last=$n		# the small stream kept

test_expect_success 'WAL objects did go' '
	test "$(grep -c "failpoint owal.after_delete: crash" "$LOG")" = 1
'

# OWG3: the crashes at owal.before_delete left WAL objects below the floor
# (OW7 records it, then deletes), their DELETEs owed in DATA/owal/gc; each
# remount sent them again, so none is left (F32 would name it: fsck lists
# the embedded store, GC_FSCK names it; a bucket it does not).
if [ -n "$GC_FSCK" ]; then
	test_expect_success 'nereusfs-fsck: no WAL object a crash left below the floor stays (F32)' '
		! test -e "$DATA/owal/gc" &&
		fsck_expect 0 "$DATA" $GC_FSCK -- &&
		! grep -q "F32\|F26 objects/owal/" "$TRASH/fsck.out"
	'
fi

test_expect_success 'host lost after GC: recover brings back every acknowledged append' '
	rm -rf "$DATA" &&
	nrs_mount -o "recover,$HOLD" &&
	grep -q "recover: done" "$LOG" &&
	nrs_verify_records -c $big_acks "$BIG" &&
	nrs_verify_records -c -a "$TRASH/ack.s.$last" -a "$TRASH/ack.st.$last" "$K/s.$last" &&
	test "$(ls "$K" | wc -l)" = 2 &&
	nrs_umount
'
