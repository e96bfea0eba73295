# objwal.sh - the object WAL tests (issue 15: the object-wal profile, its
# ack boundary, crashes), run once per object store provider: sourced by
# t0700-objwal-dir.sh, t0710-objwal-s3.sh and t0720-objwal-moto.sh after
# lib.sh and the provider's file (dirstore.sh, s3.sh, moto.sh: OBJ_OPTS,
# OBJ_STORE, obj_files).
#
# What it checks: user.nereus.profile=object-wal on a directory is
# inherited by the streams created below; appends to them are acknowledged
# from WAL objects under owal/ in the store (user.nereus.index names them,
# walobj:KEY:OFF), while local-wal streams beside them keep the local
# WAL; after a clean remount and after kill -9 every acknowledged append
# is there, byte-exact and in order (I1, I3), read from the WAL objects;
# a crash at each object-WAL failpoint converges; a PUT whose answer is
# lost is proven by HEAD; once materialized, the WAL objects are deleted.

. "$nrs_lib/objlib.sh"

# A mount scans every WAL object not yet reclaimed, one HEAD and GET
# after another (wal_object_scan.c OW8), and this suite materializes
# nothing until its end: on moto (Python) with the cores kept busy that
# takes longer than lib.sh's 10 s.
NRS_MOUNT_TIMEOUT=${NRS_MOUNT_TIMEOUT_OWAL:-90}
# Every mount reads the object WAL's objects not yet reclaimed, one after
# another (README, Limits): 10 s a mount here by the end, at load; the
# suite mounts a dozen times.  lib.sh reads the limit as each step starts.
NRS_TEST_TIMEOUT=${NRS_TEST_TIMEOUT:-600}

# Nothing materializes on its own here: reads of object-wal ranges come
# from the WAL objects (the last tests turn materialization on).
HOLD="materialize_age_ms=3600000,materialize_bytes=1099511627776,object_wal_timeout_ms=20000"
K=$MNT/kafka
P0=$K/orders/p0
P1=$K/orders/p1
L0=$MNT/local/l0
acks=$TRASH/acks
case $OBJ_STORE in
s3) FSCK_STORE="--s3=$NRS_S3_URL" ;;
*) FSCK_STORE= ;;
esac

# WAL objects in the store, not counting the runs' markers (seq 0, kept:
# wal_object.c OW11) nor their seals (kept: wal_object_seal.c SL2).
owal_objects () {
	obj_files | grep '/owal/' |
		grep -vc '/\(0000000000\|seal\)\(\._S3rver_object\)\{0,1\}$'
}

no_owal_objects () {
	test "$(owal_objects)" = 0
}

test_expect_success 'a directory passes object-wal down to the streams made below it' '
	nrs_mount -o "$HOLD$OBJ_OPTS" &&
	mkdir "$K" "$MNT/local" &&
	setfattr -n user.nereus.profile -v object-wal "$K" &&
	test "$(nrs_xattr "$K" user.nereus.profile)" = object-wal &&
	mkdir "$K/orders" &&
	: >"$P0" &&
	test "$(nrs_xattr "$P0" user.nereus.profile)" = object-wal &&
	: >"$L0" &&
	test "$(nrs_xattr "$L0" user.nereus.profile)" = local-wal
'

test_expect_success 'appends are acknowledged from WAL objects; local-wal keeps the local WAL' '
	nrs-appender -t 6 -n 150 -s 33-9000 -w 100 -a "$acks" "$P0" "$P1" "$L0" &&
	nrs_verify_records -c -a "$acks" "$P0" "$P1" "$L0" &&
	test "$(owal_objects)" -gt 0 &&
	test "$(nrs_metric object_wal_objects_total)" -gt 0 &&
	nrs_xattr "$P0" user.nereus.index | grep -q " walobj:owal/[0-9a-f]*/[0-9a-f]*:[0-9]*$" &&
	! nrs_xattr "$P0" user.nereus.index | grep -q " wal:" &&
	nrs_xattr "$L0" user.nereus.index | grep -q " wal:" &&
	grep -q "\"object_wal\": {\"objects\": [1-9]" "$MNT/.nereus/status"
'

test_expect_success 'a stream with bytes keeps its profile; an empty one may change' '
	expect_errno EINVAL setxattr "$P0" user.nereus.profile local-wal &&
	: >"$K/orders/empty" &&
	setfattr -n user.nereus.profile -v local-wal "$K/orders/empty" &&
	test "$(nrs_xattr "$K/orders/empty" user.nereus.profile)" = local-wal &&
	: >"$L0.new" &&
	setfattr -n user.nereus.profile -v object-wal "$L0.new" &&
	test "$(nrs_xattr "$L0.new" user.nereus.profile)" = object-wal
'

test_expect_success 'remount: every acknowledged append, read from the WAL objects' '
	nrs_umount &&
	nrs_mount -o "$HOLD$OBJ_OPTS" &&
	nrs_verify_records -c -a "$acks" "$P0" "$P1" "$L0" &&
	test "$(nrs_xattr "$P0" user.nereus.profile)" = object-wal &&
	test "$(nrs_xattr "$P0" user.nereus.materialized)" = 0
'

test_expect_success 'kill -9 under load: every acknowledged append byte-exact, none twice' '
	nrs_bg nrs-appender -t 6 -d 30 -s 33-9000 -w 200 -a "$TRASH/ack.k9" \
		"$P0" "$P1" "$L0" >"$TRASH/app.k9" 2>&1 &&
	app=$NRS_LAST_BG &&
	nrs_wait_for 20 test -s "$TRASH/ack.k9" &&
	sleep 1 &&
	nrs_kill9 &&
	{ nrs_wait $app 30; arc=$?; } &&
	test "$arc" = 3 &&
	nrs_mount -o "$HOLD$OBJ_OPTS" &&
	nrs_verify_records -u 1 -a "$acks" -a "$TRASH/ack.k9" "$P0" "$P1" "$L0"
'

test_expect_success 'nereusfs-fsck reads the object WAL: every head reachable' '
	nrs_umount &&
	fsck_expect 0 "$DATA" $FSCK_STORE -- &&
	fsck_expect 0 "$DATA" $FSCK_STORE --no-objects -- &&
	nrs_mount -o "$HOLD$OBJ_OPTS"
'

# F31: a database that lost a change the object WAL logged (an old copy
# of meta.db put back) is found; the database it was is clean again.
test_expect_success 'nereusfs-fsck: a database behind the change log is F31' '
	nrs_umount &&
	cp "$DATA/meta.db" "$TRASH/meta.old" &&
	nrs_mount -o "$HOLD$OBJ_OPTS" &&
	mkdir "$K/f31" &&
	nrs_umount &&
	! test -s "$DATA/meta.db-wal" &&
	mv "$DATA/meta.db" "$TRASH/meta.new" &&
	cp "$TRASH/meta.old" "$DATA/meta.db" &&
	fsck_expect 1 "$DATA" $FSCK_STORE -- "error: F31 owal/" \
		"but the database'"'"'s change log ends at" &&
	mv "$TRASH/meta.new" "$DATA/meta.db" &&
	fsck_expect 0 "$DATA" $FSCK_STORE -- &&
	nrs_mount -o "$HOLD$OBJ_OPTS" &&
	rmdir "$K/f31"
'

# A crash at each step of an object-WAL append: before the PUT, after it
# (its answer lost), after the proof, before the publish, before the reply.
# A provider's suite may run fewer (OWAL_CRASH_POINTS): each point costs
# two mounts, and each mount scans every WAL object held so far.
w=300
crash_acks=
for point in ${OWAL_CRASH_POINTS:-owal.before_put owal.after_put \
	owal.after_proof meta.before_commit pipeline.before_reply}; do
	w=$((w + 10))
	crash_acks="$crash_acks -a $TRASH/ack.$point"
	test_expect_success "crash at $point: remount, every acknowledged append" '
		nrs_umount &&
		NRS_FAILPOINTS="$point=crash@5" &&
		export NRS_FAILPOINTS &&
		nrs_mount -o "$HOLD$OBJ_OPTS" &&
		unset NRS_FAILPOINTS &&
		nrs_bg nrs-appender -t 2 -d 20 -s 33-8000 -w $w \
			-a "$TRASH/ack.$point" "$P0" "$P1" >"$TRASH/app.$point" 2>&1 &&
		app=$NRS_LAST_BG &&
		nrs_wait_for 20 sh -c "! kill -0 $NRS_PID 2>/dev/null" &&
		nrs_kill9 &&
		{ nrs_wait $app 30; arc=$?; } &&
		test "$arc" = 3 &&
		grep "failpoint $point: crash at hit 5\$" "$LOG" &&
		nrs_mount -o "$HOLD$OBJ_OPTS" &&
		nrs_verify_records -u 1 -a "$acks" -a "$TRASH/ack.k9" \
			$crash_acks "$P0" "$P1" "$L0"
	'
done

test_expect_success 'a lost PUT answer is resolved by HEAD, not by another object' '
	nrs_umount &&
	NRS_FAILPOINTS="owal.after_put=error:EIO" &&
	export NRS_FAILPOINTS &&
	nrs_mount -o "$HOLD$OBJ_OPTS" &&
	unset NRS_FAILPOINTS &&
	nrs-appender -t 2 -n 40 -s 33-4000 -w 400 -a "$TRASH/ack.lost" "$P0" "$P1" &&
	test "$(nrs_metric object_wal_put_retries_total)" = 0 &&
	grep -q "failpoint owal.after_put" "$LOG" &&
	nrs_verify_records -u 1 -a "$acks" -a "$TRASH/ack.k9" -a "$TRASH/ack.lost" \
		$crash_acks "$P0" "$P1" "$L0"
'

# The adapter's recipe after an uncertain outcome (README, Adapters): the
# daemon dies once the PUT of the WAL object holding an append has landed
# but before the write returned; after the remount, the same bytes as a
# conditional append at the offset the adapter expected fail ESPIPE and
# are there: the append had landed.  Dying before the PUT: the same
# conditional append succeeds, once.  The stream is made before the
# failpoint is armed: its create is a META record of the object WAL too
# (core_metalog.c NS1), whose PUT would take the crash.
uncertain () { # POINT NAME
	: >"$K/$2" &&
	nrs_umount &&
	NRS_FAILPOINTS="$1=crash" &&
	export NRS_FAILPOINTS &&
	nrs_mount -o "$HOLD$OBJ_OPTS" &&
	unset NRS_FAILPOINTS &&
	test_must_fail sh -c "printf uncertain >>\"$K/$2\"" 2>/dev/null &&
	nrs_kill9 &&
	nrs_mount -o "$HOLD$OBJ_OPTS"
}

test_expect_success 'a PUT whose answer was lost: the conditional append says it landed' '
	uncertain owal.after_put landed &&
	test "$(cat "$K/landed")" = uncertain &&
	expect_errno ESPIPE pwrite "$K/landed" 0 uncertain &&
	test "$(cat "$K/landed")" = uncertain
'

test_expect_success 'a PUT never sent: the conditional append lands it, once' '
	uncertain owal.before_put lost &&
	test "$(stat -c %s "$K/lost")" = 0 &&
	expect_errno ok pwrite "$K/lost" 0 uncertain >/dev/null &&
	expect_errno ESPIPE pwrite "$K/lost" 0 uncertain &&
	test "$(cat "$K/lost")" = uncertain
'

test_expect_success 'materialized, the WAL objects are deleted; the bytes stay' '
	nrs_umount &&
	nrs_mount -o "$FAST,checkpoint_ms=300,gc_grace_ms=300$OBJ_OPTS" &&
	wait_materialized -t 60 "$P0" "$P1" "$L0" &&
	nrs_wait_for 30 no_owal_objects &&
	test "$(nrs_metric object_wal_held_objects)" = 0 &&
	nrs_umount &&
	nrs_mount -o "$FAST,checkpoint_ms=300,gc_grace_ms=300$OBJ_OPTS" &&
	nrs_verify_records -u 1 -a "$acks" -a "$TRASH/ack.k9" -a "$TRASH/ack.lost" \
		$crash_acks "$P0" "$P1" "$L0" &&
	nrs_umount
'
