# hostloss.sh - a lost host recovered from the bucket alone (issue 15:
# -o recover, core_recover.c RB1-RB3), run once per provider: sourced by
# t0730-hostloss-dir.sh (the embedded store, in a directory apart from
# the data directory: -o objects=) and t0731-hostloss-s3.sh (s3rver) after
# lib.sh and the provider's file; the script sets HL_OPTS, the mount
# options naming the store.
#
# What it checks: a namespace with directories, object-wal and local-wal
# streams, a rename and xattrs, then a checkpoint; appenders on the
# object-wal streams and a local-wal one; kill -9 and the data directory
# deleted; -o recover on a new data directory brings back every
# acknowledged object-wal append byte-exact and in order, the namespace
# and xattrs -- also those changed under the object-wal directory while
# the appends ran, after the last checkpoint: no checkpoint is taken after
# them, so they come back from the object WAL's META records alone
# (core_metalog.c NS1, recovery_meta.c RM1), and so does an epoch two fences
# raised (NS4: the fence records, pipeline.c PL9, recovery.c RC9; a lower
# one is refused after the recovery) -- and the
# local-wal stream readable up to what was materialized, with the rest
# said in the log; recover leaves a data directory that holds a database
# as it is, and a recovery killed midway converges when run again.

. "$nrs_lib/objlib.sh"

PATH=${NRS_TOOLS:-$nrs_top}:$PATH	# nereusctl

# A recovery scans the object WAL's objects one after another (OW8).
NRS_MOUNT_TIMEOUT=${NRS_MOUNT_TIMEOUT_OWAL:-90}

HL="materialize_age_ms=3600000,materialize_bytes=1099511627776,checkpoint_ms=300,object_wal_timeout_ms=20000,owner_lease_ms=4000$HL_OPTS"
HL_LATE=$(echo "$HL" | sed 's/checkpoint_ms=300/checkpoint_ms=3600000,checkpoint_bytes=1099511627776/')
K=$MNT/kafka
acks=$TRASH/acks

ckpt_status () { # FIELD of "checkpoints" in /.nereus/status
	python3 -c 'import json, sys
print(json.load(open(sys.argv[1]))["checkpoints"][sys.argv[2]])' \
		"$MNT/.nereus/status" "$1"
}
# A checkpoint was skipped since the count was N: the database is what
# the last one stored holds (ckpt_service.c KC1), every change made
# before the count was read is in the bucket.
ckpt_settled () { [ "$(ckpt_status skipped)" -gt "$1" ]; }
acks_past () { [ "$(wc -l <"$acks")" -gt "$1" ]; }

test_expect_success 'a namespace, a checkpoint, appends; then the host is lost' '
	nrs_mount -o "$HL" &&
	mkdir -p "$K/orders" "$MNT/local" &&
	setfattr -n user.nereus.profile -v object-wal "$K" &&
	mkdir "$K/orders/sub" &&
	: >"$K/orders/p0" && : >"$K/orders/p1" && : >"$K/orders/old" &&
	mv "$K/orders/old" "$K/orders/sub/renamed" &&
	setfattr -n user.adapter.checkpoint -v "offset=42" "$K/orders/p0" &&
	setfattr -n user.note -v "kafka" "$K" &&
	chmod 0640 "$K/orders/p1" &&
	head -c 200000 /dev/urandom >"$TRASH/l.blob" &&
	cat "$TRASH/l.blob" >>"$MNT/local/l0" &&
	n=$(ckpt_status skipped) &&
	nrs_wait_for 20 ckpt_settled "$n" &&
	# from now on no periodic checkpoint: what reaches the bucket is the
	# object WAL
	nrs_umount &&
	nrs_mount -o "$HL_LATE" &&
	nrs_bg nrs-appender -t 4 -d 30 -s 33-9000 -w 100 -a "$acks" \
		"$K/orders/p0" "$K/orders/p1" >"$TRASH/app" 2>&1 &&
	app=$NRS_LAST_BG &&
	nrs_wait_for 20 test -s "$acks" &&
	# changes under the object-wal directory while appends run: each
	# returns once its META record is proven (core_metalog.c NS1), and
	# no checkpoint is taken after them
	taken=$(ckpt_status taken) &&
	mkdir "$K/late" &&
	printf "late" >>"$K/late/s" &&
	# epochs: each fence returns once its record of the object WAL is
	# proven (core_metalog.c NS4, pipeline.c PL9), no checkpoint
	setfattr -n user.nereus.epoch -v 5 "$K/late/s" &&
	nereusctl fence "$K/late/s" 7 &&
	setfattr -n user.adapter.checkpoint -v "offset=99" "$K/orders/p1" &&
	mv "$K/orders/sub" "$K/orders/sub2" &&
	# appends acknowledged after the last checkpoint, which only the
	# object WAL holds (and the recovery killed below re-publishes)
	n=$(wc -l <"$acks") &&
	nrs_wait_for 20 acks_past $((n + 20)) &&
	test "$(ckpt_status taken)" = "$taken" &&
	nrs_kill9 &&
	{ nrs_wait $app 30; arc=$?; } &&
	test "$arc" = 3 &&
	test "$(wc -l <"$acks")" -gt 20 &&
	rm -rf "$DATA"
'

test_expect_success 'recover does not rebuild a data directory that holds a database' '
	mkdir -m 700 "$TRASH/busy" &&
	cp "$nrs_top/README" "$TRASH/busy/meta.db" &&
	DATA0=$DATA && DATA=$TRASH/busy &&
	test_must_fail nrs_mount -o "recover,$HL" >/dev/null &&
	DATA=$DATA0 &&
	grep -q "recover: .* holds a database: it keeps its own state" "$LOG" &&
	! test -e "$TRASH/busy/recovering"
'

test_expect_success 'a recovery killed midway converges when run again' '
	mkdir -m 700 "$DATA" &&
	NRS_FAILPOINTS="recovery.before_publish=crash" &&
	export NRS_FAILPOINTS &&
	test_must_fail nrs_mount -o "recover,$HL" >/dev/null 2>&1 ;
	unset NRS_FAILPOINTS &&
	test -e "$DATA/recovering" &&
	test -e "$DATA/meta.db"
'

test_expect_success 'recover: every acknowledged object-wal append, the namespace, the xattrs' '
	nrs_mount -o "recover,$HL" &&
	! test -e "$DATA/recovering" &&
	nrs_verify_records -u 1 -a "$acks" "$K/orders/p0" "$K/orders/p1" &&
	test "$(nrs_xattr "$K/orders/p0" user.adapter.checkpoint)" = "offset=42" &&
	test "$(nrs_xattr "$K" user.note)" = kafka &&
	test "$(nrs_xattr "$K/orders/p0" user.nereus.profile)" = object-wal &&
	test -e "$K/orders/sub2/renamed" && ! test -e "$K/orders/old" &&
	! test -e "$K/orders/sub" &&
	test "$(stat -c %a "$K/orders/p1")" = 640 &&
	test "$(cat "$K/late/s")" = late &&
	test "$(nrs_xattr "$K/late/s" user.nereus.epoch)" = 7 &&
	{ nereusctl fence "$K/late/s" 6; rc=$?; } &&
	test "$rc" = 3 &&
	test "$(nrs_xattr "$K/orders/p1" user.adapter.checkpoint)" = "offset=99" &&
	grep "metadata changes (.*) replayed from the WAL.s META records" "$LOG" &&
	grep -q "recover: done" "$LOG"
'

# RP1: the last progress line's counts.  The scan starts at what the
# checkpoint covers, so it reads at least the appends acknowledged after
# the last one: 20 or more of 33 bytes at least.
test_expect_success 'recover said its progress: objects, bytes, streams' '
	line=$(grep "recover: progress: done: " "$LOG" | tail -n 1) &&
	echo "$line" &&
	objs=$(echo "$line" | sed -n "s/.*objects read \([0-9]*\),.*/\1/p") &&
	bytes=$(echo "$line" | sed -n "s/.*, bytes \([0-9]*\) .*/\1/p") &&
	streams=$(echo "$line" | sed -n "s/.*, streams \([0-9]*\),.*/\1/p") &&
	files=$(find "$K" "$MNT/local" -type f | wc -l) &&
	echo "objects $objs bytes $bytes streams $streams files $files" &&
	test "$objs" -ge 1 &&
	test "$bytes" -ge $((20 * 33)) &&
	test "$streams" = "$files" &&
	test "$(grep -c "recover: progress: done: " "$LOG")" = 1
'

test_expect_success 'a local-wal stream comes back as of the checkpoint; what was lost is said' '
	test "$(stat -c %s "$MNT/local/l0")" = 200000 &&
	test_must_fail cat "$MNT/local/l0" >/dev/null 2>&1 &&
	grep -q "recover: stream [0-9]* (local-wal) could not be brought back above offset 0" "$LOG"
'

test_expect_success 'the recovered mount appends, and a remount keeps it all' '
	nrs-appender -t 2 -n 20 -w 200 -a "$TRASH/acks2" "$K/orders/p0" "$K/orders/p1" &&
	nrs_umount &&
	nrs_mount -o "$HL" &&
	nrs_verify_records -u 1 -a "$acks" -a "$TRASH/acks2" "$K/orders/p0" "$K/orders/p1" &&
	nrs_umount
'
