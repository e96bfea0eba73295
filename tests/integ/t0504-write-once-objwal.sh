#!/bin/sh
test_description='write once for object-wal streams: large records stay generations where the object WAL stored them (mat_adopt.c MZ13, wal_object_gc.c OW18, lifecycle.c G9, core_obj.c CO4)'
# Mounts scan the WAL objects the GC keeps for their generations (OW8).
NRS_TEST_TIMEOUT=${NRS_TEST_TIMEOUT:-600}
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

NRS_MOUNT_TIMEOUT=${NRS_MOUNT_TIMEOUT_OWAL:-90}

# The store in a directory apart (it outlives the data directory for the
# host-loss step); materialize soon; checkpoints every 300 ms cover what
# the object WAL reclaims (walgc.c MZ8); a reclaimable WAL object and a
# draining generation go 500 ms later; no compaction.
B=$TRASH/bucket
mkdir -m 700 "$B"
WO="write_once=auto,objects=$B,compact_size=0,materialize_age_ms=200,checkpoint_ms=300,gc_grace_ms=500,object_wal_timeout_ms=20000,owner_lease_ms=4000"
K=$MNT/k
N=2			# streams, one writer each
R=8			# 1 MiB records per writer
MIB=1048576
TOTAL=$((N * R * MIB))
STREAMS="$K/s0 $K/s1"

# every stream's index names adopted WAL-object slices and nothing else
all_adopted () {
	nrs_all_adopted owal/ $STREAMS
}

# bytes the daemon wrote to storage (/proc/PID/io)
write_bytes () {
	sed -n 's/^write_bytes: //p' "/proc/$NRS_PID/io"
}

# KiB of the WAL objects in the store
owal_kib () {
	du -sk "$B/owal" | cut -f1
}

# the object WAL holds (reads, scans) none of the adopted objects any more
owal_let_go () {
	test "$(nrs_metric object_wal_held_bytes)" -lt $((TOTAL / 4))
}

test_expect_success 'an object-wal directory' '
	nrs_mount -o "$WO" &&
	mkdir "$K" &&
	setfattr -n user.nereus.profile -v object-wal "$K" &&
	: >"$K/s0" && : >"$K/s1" &&
	sync
'

test_expect_success '1 MiB records of object-wal streams are adopted, each byte written once' '
	w0=$(write_bytes) &&
	nrs-appender -t $N -n $R -s $MIB -a "$TRASH/ack" $STREAMS &&
	nrs_wait_for 60 all_adopted &&
	test "$(nrs_metric object_adopted_total)" -eq $((N * R)) &&
	test "$(nrs_metric object_adopted_bytes_total)" -eq $TOTAL &&
	test "$(find "$B/s" -type f 2>/dev/null | wc -l)" -eq 0 &&
	sync && sleep 1 &&
	w1=$(write_bytes) &&
	echo "daemon wrote $((w1 - w0)) bytes for $TOTAL" &&
	test $((w1 - w0)) -lt $((TOTAL * 5 / 4))
'

test_expect_success 'the object WAL lets go of them, the objects stay (OW18); the bytes are stored once' '
	nrs_wait_for 60 owal_let_go &&
	kib=$(owal_kib) &&
	echo "owal: $kib KiB for $((TOTAL / 1024)) KiB" &&
	test "$kib" -ge $((TOTAL / 1024)) &&
	test "$kib" -lt $((TOTAL / 1024 * 5 / 4)) &&
	nrs_verify_records -c -u 0 -a "$TRASH/ack" $STREAMS &&
	for s in 0 1; do cat "$K/s$s" >"$TRASH/s$s.before" || return 1; done
'

test_expect_success 'kill -9, remount: every byte the same, read from the rows' '
	nrs_kill9 &&
	nrs_mount -o "$WO" &&
	all_adopted &&
	for s in 0 1; do cmp "$TRASH/s$s.before" "$K/s$s" || return 1; done &&
	nrs_umount
'

test_expect_success 'nereusfs-fsck: clean, no WAL object below the floor reported (F32)' '
	fsck_expect 0 "$DATA" --objects="$B" -- &&
	! grep -q "F32\|F25\|F26" "$TRASH/fsck.out"
'

test_expect_success 'host lost: recover brings back every adopted byte from the store' '
	rm -rf "$DATA" &&
	mkdir -m 700 "$DATA" &&
	nrs_mount -o "recover,$WO" &&
	grep -q "recover: done" "$LOG" &&
	for s in 0 1; do cmp "$TRASH/s$s.before" "$K/s$s" || return 1; done &&
	all_adopted &&
	nrs_verify_records -c -u 0 -a "$TRASH/ack" $STREAMS
'

# s0's slices go: punched out of the WAL objects s1 shares (G6, G9), or
# the objects deleted with their last row (G7).
test_expect_success 'unlink returns the space of its slices' '
	before=$(owal_kib) &&
	rm "$K/s0" &&
	nrs_wait_for 60 sh -c "test \$(du -sk $B/owal | cut -f1) -lt $((before - R * 1024 * 3 / 4))" &&
	cmp "$TRASH/s1.before" "$K/s1"
'

test_expect_success 'retention returns the space of the rest' '
	before=$(owal_kib) &&
	setfattr -n user.nereus.retention.bytes -v 1 "$K/s1" &&
	nrs_wait_for 60 sh -c "test \$(du -sk $B/owal | cut -f1) -lt $((before - (R - 1) * 1024 * 3 / 4))" &&
	nrs_umount &&
	fsck_expect 0 "$DATA" --objects="$B" -- &&
	! grep -q "F32\|F25\|F26" "$TRASH/fsck.out"
'

test_done
