#!/bin/sh
test_description='S3 goes away and comes back: appends go on from the WAL, then ENOSPC at the WAL budget; materialization catches up by itself; credentials at mount'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/s3.sh"
. "$nrs_lib/objlib.sh"

# What issue 4 asks of an unavailable object store: appends keep
# succeeding from the WAL up to its budget, then fail ENOSPC; uploads are
# retried with backoff (logged, counted) and materialization resumes on its
# own when the store returns, nothing acknowledged lost.  The store goes
# away for real: s3rver is stopped (connections refused) and restarted on
# the same port and data (s3.sh).

nrs_s3_start
S3=",s3=$NRS_S3_URL"
S=$MNT/k/s
T=$MNT/k/t
acks=$TRASH/acks

# wait_for SECONDS COMMAND...: until COMMAND succeeds, SECONDS at most.
wait_for () {
	local n=0 limit=$1
	shift
	until "$@"; do
		if [ $n -ge $((limit * 10)) ]; then
			echo "wait_for: still failing after $limit s: $*"
			return 1
		fi
		sleep 0.1
		n=$((n + 1))
	done
}

# FILE has committed bytes the object store does not hold yet.
is_behind () {
	test "$(nrs_xattr "$1" user.nereus.materialized)" -lt \
		"$(nrs_xattr "$1" user.nereus.head)"
}

# The daemon's log since the last mount has a line matching $1.
log_has () {
	nrs_log_since_mount | grep -q "$1"
}

# metric_past NAME N: the metric nereus_NAME is above N.
metric_past () {
	test "$(metric "$1")" -gt "$2"
}

# ---- (a) the store stops mid-way, comes back -------------------------

test_expect_success 'on S3: appends materialize' '
	nrs_mount -o "$FAST$S3" &&
	mkdir "$MNT/k" &&
	nrs-appender -t 2 -n 200 -s 33-8000 -w 100 -a "$acks" "$S" "$T" &&
	wait_materialized "$S" "$T" &&
	grep "\"store\": \"s3\"" "$MNT/.nereus/status" &&
	objects_match "$S" "$T"
'

# While the store is away the bytes still in the WAL read back, and those
# only in objects fail EIO, logged as what it is (not as a lost object).
test_expect_success 'S3 stopped: appends go on, materialized stays behind, uploads retried' '
	r0=$(metric object_upload_retries_total) &&
	nrs_s3_stop &&
	nrs-appender -t 2 -n 200 -s 33-8000 -w 200 -a "$acks" "$S" "$T" &&
	is_behind "$S" && is_behind "$T" &&
	wait_for 20 metric_past object_upload_retries_total "$r0" &&
	r1=$(metric object_upload_retries_total) &&
	wait_for 20 metric_past object_upload_retries_total "$r1" &&
	is_behind "$S" && is_behind "$T" &&
	test "$(nrs_xattr "$S" user.nereus.wal_bytes)" -gt 0 &&
	nrs_log_since_mount >"$TRASH/log.a" &&
	sed -n "/s3rver stopped/,\$p" "$TRASH/log.a" >"$TRASH/log.outage" &&
	grep "upload not proven (PUT: Connection refused.*retrying with backoff" \
		"$TRASH/log.outage" &&
	nrs-syscalls open a "$T" rdonly,direct -- expect EIO pread a 0 4096 &&
	log_has "offset 0: object .* cannot be fetched, the object store is unavailable (Connection refused)" &&
	m=$(nrs_xattr "$S" user.nereus.materialized) &&
	h=$(nrs_xattr "$S" user.nereus.head) &&
	mkdir "$TRASH/tail" &&
	dd if="$S" iflag=direct,skip_bytes skip="$m" bs=65536 \
		of="$TRASH/tail/s" status=none &&
	test "$(stat -c %s "$TRASH/tail/s")" = $((h - m)) &&
	nrs-verify "$TRASH/tail/s"
'

test_expect_success 'S3 back on the same port: materialized catches up by itself' '
	nrs_s3_restart &&
	wait_materialized -t 60 "$S" "$T" &&
	test "$(nrs_xattr "$S" user.nereus.wal_bytes)" = 0 &&
	test "$(nrs_xattr "$T" user.nereus.wal_bytes)" = 0 &&
	nrs_log_since_mount | grep "object .* stored after [0-9]* retries" &&
	nrs_verify_records -c -u 0 -a "$acks" "$S" "$T" &&
	objects_match "$S" "$T"
'

test_expect_success 'remount: every acknowledged append there, from objects' '
	nrs_remount -o "$FAST$S3" &&
	nrs_verify_records -c -u 0 -a "$acks" "$S" "$T" &&
	! nrs_xattr "$S" user.nereus.index | grep " wal:" &&
	! nrs_xattr "$T" user.nereus.index | grep " wal:"
'

# ---- (b) backpressure: the WAL budget --------------------------------

# Three 1 MiB segments' worth: with the store away, appends fill the WAL
# and then fail ENOSPC (wal_local_append.c WA6).  The budget counts bytes, so a
# write smaller than the one refused may still fit: the probe is larger
# than any record of the appender.
BUDGET="$FAST,wal_budget=3145728"
B1=$MNT/b/one
B2=$MNT/b/two
backs=$TRASH/acks.b

test_expect_success 'store away at mount: appends fill the WAL budget, then ENOSPC' '
	nrs_umount &&
	nrs_s3_stop &&
	nrs_mount -o "$BUDGET$S3" &&
	mkdir "$MNT/b" &&
	{ nrs-appender -t 2 -d 60 -s 33-8000 -w 300 -a "$backs" "$B1" "$B2" \
		>"$TRASH/app.b" 2>&1; rc=$?; } &&
	cat "$TRASH/app.b" &&
	test "$rc" = 3 &&
	test "$(grep -c ": write: " "$TRASH/app.b")" = 2 &&
	test "$(grep -c ": write: ENOSPC\$" "$TRASH/app.b")" = 2 &&
	expect_errno ENOSPC writen "$MNT/b/probe" 65536 &&
	test "$(stat -c %s "$MNT/b/probe")" = 0 &&
	acked=$(($(stat -c %s "$B1") + $(stat -c %s "$B2"))) &&
	test "$acked" -gt 1048576 && test "$acked" -le 3145728 &&
	is_behind "$B1" && is_behind "$B2" &&
	nrs_verify_records -c -u 0 -a "$backs" "$B1" "$B2"
'

test_expect_success 'unmount with the store away is clean; remount serves the WAL, still ENOSPC' '
	nrs_umount &&
	nrs_mount -o "$BUDGET$S3" &&
	nrs_verify_records -c -u 0 -a "$backs" "$B1" "$B2" &&
	expect_errno ENOSPC writen "$MNT/b/probe" 65536
'

test_expect_success 'store back: catches up, segments reclaimed, appends succeed without remount' '
	reclaimed=$(metric wal_reclaimed_segments_total) &&
	nrs_s3_restart &&
	wait_materialized -t 60 "$B1" "$B2" &&
	wait_for 20 metric_past wal_reclaimed_segments_total "$reclaimed" &&
	test "$(metric wal_bytes)" -lt 2097152 &&
	nrs-appender -t 2 -n 100 -s 33-8000 -w 400 -a "$backs" "$B1" "$B2" &&
	expect_errno ok writen "$MNT/b/probe" 4096 &&
	nrs_verify_records -c -u 0 -a "$backs" "$B1" "$B2" &&
	wait_materialized "$B1" "$B2" "$MNT/b/probe" &&
	objects_match "$S" "$T" "$B1" "$B2" "$MNT/b/probe" &&
	nrs_umount
'

# ---- orphans: only a stopped run's uploads, never a live one ----------

# An upload a stop interrupts leaves its intent (a prepared row) for the
# next mount to clean up (materializer.c MZ6).  With the store away at that
# mount, the cleanup waits for it while another thread starts an upload of
# its own; once the store is back, the cleanup must remove the old intents
# only.  The failpoint holds this mount's upload unproven (its PUTs fail),
# so that it is in flight whenever the cleanup runs.
D=$MNT/d

test_expect_success 'store away: an upload a stop interrupts is left behind' '
	nrs_mount -o "$FAST$S3" &&
	nrs_s3_stop &&
	nrs-appender -t 1 -n 50 -s 33-8000 -w 600 -a "$TRASH/acks.d" "$D" &&
	wait_for 20 log_has "upload not proven" &&
	nrs_umount
'

test_expect_success 'remount, store still away: cleanup waits, a new upload starts' '
	NRS_FAILPOINTS=obj.before_put=error:EIO@1+ &&
	export NRS_FAILPOINTS &&
	nrs_mount -o "$FAST$S3" &&
	unset NRS_FAILPOINTS &&
	wait_for 20 log_has "orphan object .*: cannot remove it yet" &&
	wait_for 20 log_has "object .*: upload not proven"
'

test_expect_success 'store back: the cleanup removes the old intents, not the live upload' '
	nrs_s3_restart &&
	wait_for 30 log_has "removed orphan object" &&
	sleep 1 &&
	nrs_log_since_mount >"$TRASH/log.d" &&
	sed -n "s/.*removed orphan object \([^ ]*\) .*/\1/p" "$TRASH/log.d" |
		sort -u >"$TRASH/removed" &&
	sed -n "s/.*object \([^ ]*\): upload not proven.*/\1/p" "$TRASH/log.d" |
		sort -u >"$TRASH/inflight" &&
	test -s "$TRASH/inflight" &&
	comm -12 "$TRASH/removed" "$TRASH/inflight" >"$TRASH/both" &&
	test_cmp /dev/null "$TRASH/both" &&
	! grep "publishing object .* failed" "$TRASH/log.d"
'

test_expect_success 'remount: the held upload is cleaned up, all materializes' '
	nrs_remount -o "$FAST$S3" &&
	wait_for 20 log_has "removed orphan object" &&
	wait_materialized "$D" &&
	nrs_verify_records -c -u 0 -a "$TRASH/acks.d" "$D" &&
	objects_match "$S" "$T" "$B1" "$B2" "$MNT/b/probe" "$D" &&
	nrs_umount
'

# ---- (c) credentials at mount ----------------------------------------

creds=$TRASH/s3.creds

test_expect_success 'a credentials file others can read is refused at mount' '
	printf "AWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n" \
		"$NRS_S3_ACCESS_KEY" "$NRS_S3_SECRET_KEY" >"$creds" &&
	chmod 0644 "$creds" &&
	test_must_fail nrs_mount -o "s3_credentials=$creds$S3" &&
	! nrs_is_mounted &&
	nrs_log_since_mount |
		grep "s3 credentials $creds: must be a regular file no other user can read or write (mode 0600), not 0644"
'

test_expect_success 'a 0600 credentials file works, without the environment' '
	chmod 0600 "$creds" &&
	unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY &&
	nrs_mount -o "s3_credentials=$creds,$FAST$S3" &&
	nrs-appender -t 1 -n 50 -s 33-8000 -w 500 -a "$TRASH/acks.c" "$MNT/c" &&
	wait_materialized "$MNT/c" &&
	nrs_verify_records -c -u 0 -a "$TRASH/acks.c" "$MNT/c" &&
	nrs_umount
'

test_expect_success 'no credentials at all: mount fails naming the variables' '
	unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY &&
	test_must_fail nrs_mount -o "$FAST$S3" &&
	! nrs_is_mounted &&
	nrs_log_since_mount |
		grep "S3 $NRS_S3_URL: no credentials (.*): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or -o s3_credentials=FILE"
'

test_done
