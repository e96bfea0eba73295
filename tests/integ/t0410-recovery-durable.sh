#!/bin/sh
test_description='recovery publishes only durable WAL bytes; a clean unmount leaves nothing unsynced'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# Issue 12, item 1.  The sequence that lost a whole stream: a crash right
# after a WAL write (the batch reached the page cache, never the disk, and
# was never acknowledged), a remount whose recovery re-publishes that batch
# and syncs the head, a clean unmount, a power loss.  Both daemons run
# under nrs-powerfail.so, which journals every write and sync they make in
# $DATA (one journal, one clock); nrs-powerreplay then rebuilds what the
# disk holds after a power loss at a journal point, keeping only what a
# sync made durable (tests/helpers/nrs-powerreplay.c PR1-PR3).
#
#  - recovery.c RC4 / wal_local.c WA8: the re-published batch is synced
#    before its head is published, so a power loss right after that
#    recovery (before a clean unmount could sync anything) leaves a
#    directory that nereusfs-fsck finds clean, that mounts with no broken
#    chain, and in which every acknowledged record (and at most the one
#    unacknowledged record per writer that recovery re-published) verifies.
#  - mat_object.c MZ4, walgc.c MZ5: a WAL segment is deleted only once the object
#    and the generation that cover its records are durable, so a power
#    loss right after the reclaim keeps every acknowledged record.
#  - core.c U1: after the clean unmount (exit 0) the replayed directory is
#    the live one, file for file and byte for byte: nothing the daemon left
#    was only in the page cache; and it verifies too.

seed=${NRS_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d " ")}
echo "# seed $seed (NRS_SEED)"
fsck=${NRS_FSCK:-$nrs_top/nereusfs-fsck}
[ -x "$fsck" ] || nrs_error "no $fsck (run make)"

journal=$TRASH/journal
real_daemon=$NEREUSFS
live=$DATA

nrs_powerfail_daemon "$TRASH/nereusfs-pf" "$journal"

# nrs_mount_pf [SPEC] [ARGS]: mount the recorded daemon, with
# NRS_FAILPOINTS=SPEC.
nrs_mount_pf () {
	local rc
	NEREUSFS=$TRASH/nereusfs-pf
	case "${1:-}" in
	-*|"") ;;
	*)	NRS_FAILPOINTS=$1
		export NRS_FAILPOINTS
		shift ;;
	esac
	nrs_mount "$@"
	rc=$?
	unset NRS_FAILPOINTS
	NEREUSFS=$real_daemon
	return $rc
}

hit=$(awk -v s="$seed" 'BEGIN { srand(s); print 20 + int(rand() * 40) }')

test_expect_success 'recorded: 3 writers, a crash right after a WAL write' '
	nrs_mount_pf &&
	mkdir "$MNT/k" && : >>"$MNT/k/s" &&
	nrs_umount &&
	nrs_mount_pf "wal.after_write=crash@$hit" &&
	nrs_bg nrs-appender -t 3 -d 20 -s 300000-1048576 -S "$seed" -T \
		-a "$TRASH/ack" "$MNT/k/s" >"$TRASH/app.1" 2>&1 &&
	app=$NRS_LAST_BG &&
	nrs_wait_for 20 eval "! kill -0 $NRS_PID 2>/dev/null" &&
	nrs_kill9 &&
	{ nrs_wait $app 30; arc=$?; } &&
	test "$arc" = 3 &&
	grep "failpoint wal.after_write: crash at hit $hit" "$LOG" &&
	echo "# $(wc -l <"$TRASH/ack") records acknowledged before the crash"
'

# after_last_reclaim JOURNAL: the journal index right after the directory
# sync that made the last unlink of a WAL segment durable (the record
# layout is at the top of tests/helpers/nrs-powerfail.c).
after_last_reclaim () {
	python3 - "$1" <<-\EOF
	import struct, sys
	d = open(sys.argv[1], "rb").read()
	i = k = 0
	unlinked = False
	cut = None
	while i + 64 <= len(d):
	    magic, typ, _, _, _, _, _, plen, flags, total, _ = \
	        struct.unpack_from("<4sIQQQQQIIII", d, i)
	    if magic != b"NPF1" or total < 64 or i + total > len(d):
	        break
	    path = d[i + 64:i + 64 + plen]
	    if typ == 6 and path.startswith(b"wal/"):
	        unlinked = True
	    elif typ == 5 and flags & 1 and path == b"wal" and unlinked:
	        cut, unlinked = k + 1, False
	    i += total
	    k += 1
	if cut is None:
	    sys.exit("no WAL segment was reclaimed")
	print(cut)
	EOF
}

# The remount rotates segments often (1 MiB): a rotation cuts the zeros
# written ahead of the old segment's records without a sync
# (wal_local_append.c WA7).  It materializes at once, so
# that WAL segments are reclaimed (walgc.c MZ5) before the unmount:
# k_mat is a power cut right after the last reclaim, when the generation
# that let it go is durable only if its publication was synced (MZ4).
test_expect_success 'recorded: the remount re-publishes the unsynced batch, more appends, clean unmount' '
	nrs_mount_pf -o wal_segment_size=1048576,materialize_bytes=65536,materialize_age_ms=100 &&
	k_rec=$(nrs-powerreplay -c "$journal") &&
	nrs_log_since_mount | grep "recovery: re-published [1-9][0-9]* WAL records" &&
	nrs-appender -t 3 -w 10 -n 150 -s 33-8192 -S "$((seed + 1))" -T \
		-a "$TRASH/ack" "$MNT/k/s" &&
	nrs_wait_for 30 test "$(nrs_metric wal_reclaimed_segments_total)" -gt 0 &&
	echo "# $(nrs_metric wal_reclaimed_segments_total) WAL segments reclaimed" &&
	nrs_umount &&
	k_mat=$(after_last_reclaim "$journal") &&
	echo "# the last WAL reclaim is durable at journal record $k_mat"
'

# check_replay K DIR: the disk after a power loss before journal record K
# in DIR; nereusfs-fsck finds it clean, it mounts without a broken chain,
# and every record acknowledged before the cut verifies.
check_replay () {
	nrs-powerreplay "$journal" "$1" "$2" >"$TRASH/replay.out" &&
	cat "$TRASH/replay.out" &&
	before=$(sed -n "s/^cut .* before //p" "$TRASH/replay.out") &&
	awk -v t="$before" '($1 "") < (t "") { print $2, $3, $4, $5 }' \
		"$TRASH/ack" >"$TRASH/ack.cut" &&
	echo "# $(wc -l <"$TRASH/ack.cut") acks before the cut" &&
	"$fsck" "$2" &&
	DATA=$2 &&
	nrs_mount || return 1
	DATA=$live
	nrs_log_since_mount >"$TRASH/log.cut"
	if grep "commit chain broken" "$TRASH/log.cut" ||
	   ! nrs_verify_records -c -u 1 -a "$TRASH/ack.cut" "$MNT/k/s"; then
		nrs_umount
		return 1
	fi
	nrs_umount
}

test_expect_success 'RC4: a power loss right after the remount recovered keeps every acknowledged record' '
	check_replay "$k_rec" "$TRASH/cut"
'

test_expect_success 'MZ4, MZ5: a power loss after the WAL was reclaimed keeps every acknowledged record' '
	check_replay "$k_mat" "$TRASH/cut.mat"
'

# Segments rotate and stay (nothing is materialized): each rotation cut the
# old segment's zeros back without a sync, which the clean close syncs.
test_expect_success 'recorded: rotations without reclaim, clean unmount' '
	nrs_mount_pf -o wal_segment_size=1048576,materialize_bytes=1000000000000,materialize_age_ms=100000000 &&
	nrs-appender -t 3 -w 20 -n 300 -s 33-8192 -S "$((seed + 2))" -T \
		-a "$TRASH/ack" "$MNT/k/s" &&
	ls -l "$DATA/wal" &&
	test "$(ls "$DATA/wal" | wc -l)" -ge 3 &&
	nrs_umount
'

test_expect_success 'U1: after the clean unmount the disk holds exactly what the daemon left' '
	n=$(nrs-powerreplay -c "$journal") &&
	nrs-powerreplay "$journal" "$n" "$TRASH/end" &&
	diff -r "$live" "$TRASH/end"
'

test_expect_success 'a power loss after the clean unmount keeps every acknowledged record' '
	check_replay "$(nrs-powerreplay -c "$journal")" "$TRASH/end2"
'

test_done
