#!/bin/sh
test_description='failpoints: a crash at every step of the append pipeline and of recovery, and failed WAL writes and publications, lose nothing acknowledged'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# The points and their syntax: src/util/failpoint.c.  Each crash cycle mounts
# with one point armed to crash at its Nth hit (N random in 20..60, so the
# daemon dies under load, with batches of several writers in flight), runs
# 8 writers on 2 streams until the daemon dies, detaches the dead mount,
# remounts without failpoints and checks every invariant the verifier can.

seed=$(od -An -N4 -tu4 /dev/urandom | tr -d " ")
echo "# seed $seed"

random_between () {
	echo $(($1 + $(od -An -N2 -tu2 /dev/urandom | tr -d " ") % ($2 - $1 + 1)))
}

streams="$MNT/k/a $MNT/k/b"
acks=			# "-a FILE" for every ack log of $streams so far
vflags="-c -u 1"	# nrs-verify flags that hold for $streams

# Every acknowledged record present, whole, once and in order; at most one
# unacknowledged record per writer, above its acknowledged ones (I1, I3);
# st_size == head (I4); version == records (one append each).
verify_all () {
	nrs_verify_records $vflags $acks $streams
}

# Wait up to $1 seconds for the daemon to die by itself.
wait_daemon_death () {
	local i=0
	while kill -0 "$NRS_PID" 2>/dev/null; do
		[ $i -ge $(($1 * 10)) ] && { echo "daemon still alive after $1 s"; return 1; }
		sleep 0.1
		i=$((i + 1))
	done
}

# Create the directory of $streams and the streams, on a mount of its own.
create_streams () {
	nrs_mount &&
	mkdir "${1%/*}" &&
	for s in $streams; do : >>"$s" || return 1; done &&
	nrs_umount
}

test_expect_success 'mount, create the streams' '
	create_streams $streams
'

# crash_under_load SPEC TAG WID: mount with SPEC (a crash), run 8 writers
# on $streams (ack log $TRASH/ack.TAG, added to $acks) until the daemon
# dies, detach the dead mount; the writers must have failed (3).
crash_under_load () {
	local app arc
	acks="$acks -a $TRASH/ack.$2"
	nrs_mount_fp "$1" &&
	nrs_bg nrs-appender -t 8 -d 20 -s 33-16416 -E 25 -w $3 -S $((seed + $3)) \
		-a "$TRASH/ack.$2" $streams >"$TRASH/app.$2" 2>&1 &&
	app=$NRS_LAST_BG &&
	wait_daemon_death 20 &&
	nrs_kill9 &&
	{ nrs_wait $app 30; arc=$?; } &&
	echo "appender exit $arc, $(wc -l <"$TRASH/ack.$2") records acknowledged" &&
	test "$arc" = 3 &&
	test "$(wc -l <"$TRASH/ack.$2")" -gt 0
}

wid=100
crashes=0
for point in wal.before_write wal.after_write wal.before_sync wal.after_sync \
	     meta.before_commit meta.after_commit pipeline.before_reply; do
	wid=$((wid + 100))
	test_expect_success "crash at $point under load: nothing acknowledged lost" '
		hit=$(random_between 20 60) &&
		echo "# $point=crash@$hit" &&
		crash_under_load "$point=crash@$hit" $point $wid &&
		grep "failpoint $point: crash at hit $hit\$" "$LOG" &&
		nrs_mount &&
		{ nrs_log_since_mount | grep -i -E "recover|cut|torn" || true; } &&
		verify_all &&
		nrs_umount &&
		crashes=$((crashes + 1))
	'
done

# A crash after the sync leaves durable WAL records past the heads, for
# recovery to re-publish.
test_expect_success 'crash in recovery, before it re-publishes: the next start recovers' '
	crash_under_load "wal.after_sync=crash@$(random_between 20 60)" recovery 1000 &&
	test_must_fail nrs_mount_fp "recovery.before_publish=crash@1" &&
	grep "failpoint recovery.before_publish: crash at hit 1\$" "$LOG" &&
	nrs_mount &&
	nrs_log_since_mount | grep "recovery: re-published" &&
	verify_all &&
	nrs_umount &&
	crashes=$((crashes + 1))
'

test_expect_success 'a failing re-publication refuses the start; nothing is lost' '
	crash_under_load "wal.after_sync=crash@$(random_between 20 60)" recovery2 1100 &&
	test_must_fail nrs_mount_fp "recovery.before_publish=error:EIO" &&
	nrs_log_since_mount | grep "recovery: publishing .* heads failed" &&
	nrs_mount &&
	verify_all &&
	nrs_umount
'

# ---- errors: a failed WAL write is undone and reported, later ones work ----

# Writers that go on after a failure (-k) leave gaps in their seqs, and a
# failed append must leave no trace: no unacknowledged record at all.
streams="$MNT/e/a $MNT/e/b"
acks=
vflags="-u 0"

test_expect_success 'mount, create the streams for the error cases' '
	create_streams $streams
'

# A short write (wal.write=short[:E], src/util/failpoint.c): half of each
# failing batch, rounded down to 512 bytes, reaches the segment before the
# error.  Every failed write is undone (wal_local_append.c WA3), so no partial
# record is ever read, published or recovered, and nereusfs-fsck finds
# nothing to cut.
FSCK=${NRS_FSCK:-$nrs_top/nereusfs-fsck}
wid=2000
# Records of 256 KiB - 1 MiB (the ":big" specs) make batches large, which
# the syncer thread syncs in groups while the next are written
# (src/commit/pipeline.c PL2): a failed sync there fails every batch written and
# not yet synced, and leaves no trace of any.
for spec in wal.before_write=error:ENOSPC wal.after_write=error:ENOSPC \
	    wal.before_sync=error:EIO wal.after_sync=error:EIO \
	    wal.write=short wal.write=short:ENOSPC \
	    wal.before_sync=error:EIO:big wal.after_sync=error:EIO:big; do
	wid=$((wid + 100))
	sizes=33-4096
	case $spec in *:big) spec=${spec%:big} sizes=262144-1048576 ;; esac
	point=${spec%%=*}
	err=${spec##*:}
	said="error"
	case $spec in
	*=short*) said="short write of [1-9][0-9]* of [0-9]* bytes, then error" ;;
	esac
	case $spec in *=short) err=EIO ;; esac
	test_expect_success "$spec at hits 10-14 (records $sizes bytes): those appends fail $err, undone, nothing acknowledged lost, later appends succeed" '
		ack=$TRASH/ack.$wid.err &&
		acks="$acks -a $ack" &&
		nrs_mount_fp "$spec@10-14" &&
		{ nrs-appender -k -t 4 -n 40 -s $sizes -w $wid -S $((seed + wid)) \
			-a "$ack" $streams >"$TRASH/app.err" 2>&1; arc=$?; } &&
		cat "$TRASH/app.err" &&
		test "$arc" = 3 &&
		grep -q "$err" "$TRASH/app.err" &&
		nrs_log_since_mount >"$TRASH/log.err" &&
		grep "failpoint $point: " "$TRASH/log.err" &&
		test "$(grep -c "failpoint $point: $said" "$TRASH/log.err")" = 5 &&
		test "$(grep -c "failed: .* (undone)\$" "$TRASH/log.err")" = 5 &&
		groups=$(nrs_metric wal_group_syncs_total) &&
		echo "group syncs: $groups" &&
		if test $sizes = 33-4096; then test "$groups" = 0; else test "$groups" -gt 0; fi &&
		nrs-appender -t 4 -n 20 -s 33-4096 -w $((wid + 50)) -a "$ack" $streams &&
		verify_all &&
		nrs_umount &&
		"$FSCK" "$DATA" &&
		nrs_mount &&
		verify_all &&
		nrs_umount
	'
done

# The publisher retries a failed publication for about 30 s
# (src/commit/pipeline.c PL3), then fails the pipeline.
test_expect_success 'publication failing EIO for good: appends fail EIO, pipeline_failed 1, a remount recovers every acknowledged append' '
	ack=$TRASH/ack.publish &&
	acks="$acks -a $ack" &&
	vflags="-u 1" &&
	nrs_mount_fp "meta.before_commit=error:EIO@10+" &&
	{ nrs-appender -t 4 -d 60 -s 33-4096 -w 3000 -S $seed \
		-a "$ack" $streams >"$TRASH/app.publish" 2>&1; arc=$?; } &&
	cat "$TRASH/app.publish" &&
	test "$arc" = 3 &&
	grep -q EIO "$TRASH/app.publish" &&
	grep "commit pipeline failed" "$LOG" &&
	grep "^nereus_pipeline_failed 1\$" "$MNT/.nereus/metrics" &&
	expect_errno EIO append "$MNT/e/a" late &&
	nrs_umount &&
	nrs_mount &&
	verify_all &&
	grep "^nereus_pipeline_failed 0\$" "$MNT/.nereus/metrics" &&
	nrs-appender -t 4 -n 20 -s 33-4096 -w 3100 -a "$ack" $streams &&
	verify_all &&
	nrs_umount
'

test_expect_success 'NRS_FAILPOINTS that does not parse: the daemon refuses to start' '
	test_must_fail nrs_mount_fp "wal.after_wrte=crash" &&
	nrs_log_since_mount | grep "NRS_FAILPOINTS=.* does not parse"
'

echo "# crash cycles passed: $crashes"
test_done
