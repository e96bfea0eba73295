#!/bin/sh
test_description='recovery publishes only durable WAL bytes; a clean unmount leaves nothing unsynced'
. "${NRS_TESTLIB:-$(dirname "$0")/lib.sh}"

# Issue 12, item 1.  The sequence that lost a whole stream: a crash right
# after a WAL write (the batch reached the page cache, never the disk, and
# was never acknowledged), a remount whose recovery re-publishes that batch
# and syncs the head, a clean unmount, a power loss.  Both daemons run
# under nrs-powerfail.so, which journals every write and sync they make in
# $DATA (one journal, one clock); nrs-powerreplay then rebuilds what the
# disk holds after a power loss at a journal point, keeping only what a
# sync made durable (tests/helpers/nrs-powerreplay.c D1-D3).
#
#  - recovery.c R4 / wal_local.c S1: the re-published batch is synced
#    before its head is published, so a power loss right after that
#    recovery (before a clean unmount could sync anything) leaves a
#    directory that nereusfs-fsck finds clean, that mounts with no broken
#    chain, and in which every acknowledged record (and at most the one
#    unacknowledged record per writer that recovery re-published) verifies.
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

# nrs_mount_pf [SPEC]: mount the recorded daemon, with NRS_FAILPOINTS=SPEC.
nrs_mount_pf () {
	local rc
	NEREUSFS=$TRASH/nereusfs-pf
	if [ -n "${1:-}" ]; then
		NRS_FAILPOINTS=$1
		export NRS_FAILPOINTS
	fi
	nrs_mount
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

test_expect_success 'recorded: the remount re-publishes the unsynced batch, more appends, clean unmount' '
	nrs_mount_pf &&
	k_rec=$(nrs-powerreplay -c "$journal") &&
	nrs_log_since_mount | grep "recovery: re-published [1-9][0-9]* WAL records" &&
	nrs-appender -t 3 -w 10 -n 50 -s 33-8192 -S "$((seed + 1))" -T \
		-a "$TRASH/ack" "$MNT/k/s" &&
	nrs_umount
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

test_expect_success 'R4: a power loss right after the remount recovered keeps every acknowledged record' '
	check_replay "$k_rec" "$TRASH/cut"
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
