# lifecycle.sh - the lifecycle tests, run once per object store provider:
# sourced by t0600-lifecycle.sh (embedded store) and t0605-lifecycle-s3.sh
# (S3) after lib.sh and the provider's file, which sets OBJ_OPTS, obj_file
# and obj_files, and maybe obj_sync (objlib.sh says what each is);
# t0607-lifecycle-moto.sh runs it on moto_server.
#
# What it checks (lifecycle.c L1-L3 and G1-G4): retention by bytes on a
# directory and by time on a stream trims at object boundaries; GC deletes
# the objects below the cut after the grace period, so that the bytes the
# store holds in objects (the data directory's, the bucket's) come back to
# what is kept, within a tolerance; an unlinked stream stays readable
# through an open handle, and its objects go after the close; a crash
# before and after a GC delete converges on remount.  The store is checked
# through obj_file and obj_files, never by asking nereusfs.

. "$nrs_lib/objlib.sh"

# gc_grace_ms=300 on top of FAST (no compaction, objects of 256 KiB).
OPTS="$FAST,gc_grace_ms=300$OBJ_OPTS"

xattr_is () { # FILE NAME VALUE
	[ "$(nrs_xattr "$1" "$2")" = "$3" ]
}
metric_ge () { # NAME N
	[ "$(nrs_metric "$1")" -ge "$2" ]
}
metric_is () { # NAME VALUE
	[ "$(nrs_metric "$1")" = "$2" ]
}
obj_bytes_below () { # N
	[ "$(obj_bytes)" -lt "$1" ]
}
started_past () { # FILE N
	[ "$(nrs_xattr "$1" user.nereus.start)" -gt "$2" ]
}

test_expect_success 'retention.bytes on a directory: cuts at an object boundary rounded down to a page, keeps at least that much' '
	nrs_mount -o "$OPTS" &&
	mkdir "$MNT/k" &&
	setfattr -n user.nereus.retention.bytes -v 1000000 "$MNT/k" &&
	head -c 3000000 /dev/urandom >"$TRASH/blob" &&
	dd if="$TRASH/blob" of="$MNT/k/r" bs=65536 oflag=append conv=notrunc status=none &&
	nrs_wait_for 20 nrs_materialized "$MNT/k/r" &&
	nrs_wait_for 10 started_past "$MNT/k/r" 0 &&
	sleep 1.5 &&	# passes after the last object was published
	start=$(nrs_xattr "$MNT/k/r" user.nereus.start) &&
	echo "# start $start" &&
	test $((3000000 - start)) -ge 1000000 &&
	test $((3000000 - start)) -lt $((1000000 + 262144 + 65536 + 4096)) &&
	test $((start % 4096)) = 0 &&	# the page cache keeps working
	set -- $(nrs_xattr "$MNT/k/r" user.nereus.index | head -1) &&
	test "$1" -le "$start" && test "$2" -gt "$start" &&	# cut below an object end
	expect_errno ENODATA pread "$MNT/k/r" $((start - 1)) 1 &&
	dd if="$MNT/k/r" iflag=skip_bytes skip="$start" status=none >"$TRASH/tail" &&
	dd if="$TRASH/blob" bs=1 skip="$start" status=none | cmp - "$TRASH/tail" &&
	test "$(nrs_metric retention_trims_total)" -ge 1
'

test_expect_success 'GC deletes the trimmed objects after the grace period: the store shrinks to what is kept' '
	nrs_wait_for 10 metric_ge gc_deleted_objects_total 1 &&
	kept=$((3000000 - start)) &&
	nrs_wait_for 10 obj_bytes_below $((kept + kept / 10 + 20000)) &&
	echo "# kept $kept bytes, objects hold $(obj_bytes) bytes in $(obj_files | wc -l) files" &&
	test "$(obj_bytes)" -ge "$kept" &&
	test "$(nrs_metric gc_draining_bytes)" = 0 &&
	test "$(nrs_metric wal_bytes)" -lt 1100000
'

test_expect_success 'retention.ms on a stream: everything older goes' '
	mkdir "$MNT/m" &&
	: >"$MNT/m/t" &&
	setfattr -n user.nereus.retention.ms -v 1500 "$MNT/m/t" &&
	head -c 800000 /dev/urandom >"$TRASH/blob.t" &&
	tail -c 1280 "$TRASH/blob.t" >"$TRASH/tail.t" &&
	dd if="$TRASH/blob.t" of="$MNT/m/t" bs=65536 oflag=append conv=notrunc status=none &&
	nrs_wait_for 20 nrs_materialized "$MNT/m/t" &&
	# 800000 rounded down to a page: 798720
	nrs_wait_for 10 xattr_is "$MNT/m/t" user.nereus.start 798720 &&
	test "$(stat -c %s "$MNT/m/t")" = 800000 &&
	expect_errno ENODATA pread "$MNT/m/t" 0 1 &&
	expect_errno ENODATA pread "$MNT/m/t" 798719 1 &&
	dd if="$MNT/m/t" iflag=skip_bytes skip=798720 status=none |
		cmp - "$TRASH/tail.t" &&
	echo more >>"$MNT/m/t" &&
	test "$(nrs-syscalls pread "$MNT/m/t" 800000 10)" = "ok 5 more\\n"
'

# The files of the objects the index of FILE names.
object_files_of () {
	index_keys "$1" | while read -r k; do obj_file "$k"; done
}
all_exist () {
	obj_sync || return 1
	for f in $(cat "$1"); do test -f "$f" || return 1; done
}
none_exist () {
	obj_sync || return 1
	for f in $(cat "$1"); do test ! -e "$f" || return 1; done
}

test_expect_success 'unlink with an open handle: reads go on until close, then GC deletes the objects' '
	head -c 900000 /dev/urandom >"$TRASH/blob.u" &&
	cp "$TRASH/blob.u" "$MNT/m/u" &&
	nrs_wait_for 20 nrs_materialized "$MNT/m/u" &&
	object_files_of "$MNT/m/u" >"$TRASH/files.u" &&
	test -s "$TRASH/files.u" &&
	exec 3<"$MNT/m/u" &&
	rm "$MNT/m/u" &&
	sleep 1 &&
	{ all_exist "$TRASH/files.u" && cmp /dev/fd/3 "$TRASH/blob.u"; rc=$?; exec 3<&-; test $rc = 0; } &&
	nrs_wait_for 10 none_exist "$TRASH/files.u"
'

# A crash between the delete and the retired state, and before the delete:
# the next start finishes the job; kept bytes are untouched.
for point in gc.before_delete gc.after_delete; do
	test_expect_success "crash at $point: GC converges after remount" "
		head -c 700000 /dev/urandom >\"\$TRASH/blob.$point\" &&
		cp \"\$TRASH/blob.$point\" \"\$MNT/m/$point\" &&
		nrs_wait_for 20 nrs_materialized \"\$MNT/m/$point\" &&
		object_files_of \"\$MNT/m/$point\" >\"\$TRASH/files.$point\" &&
		nrs_umount &&
		NRS_FAILPOINTS=$point=crash && export NRS_FAILPOINTS &&
		nrs_mount -o \"\$OPTS\" &&
		unset NRS_FAILPOINTS &&
		all_exist \"\$TRASH/files.$point\" &&
		rm \"\$MNT/m/$point\" &&
		nrs_wait_exit 20 &&
		nrs_kill9 &&
		grep \"failpoint $point: crash at hit 1\\$\" \"\$LOG\" &&
		nrs_mount -o \"\$OPTS\" &&
		nrs_wait_for 10 none_exist \"\$TRASH/files.$point\" &&
		dd if=\"\$MNT/k/r\" iflag=skip_bytes skip=\"\$start\" status=none | cmp - \"\$TRASH/tail\" &&
		nrs_wait_for 10 metric_is gc_draining_bytes 0
	"
done

# G2: a draining object stays in the store for the whole grace period,
# however often GC passes (every 500 ms) in the meantime.  A provider whose
# view of the store is slow to refresh (moto.sh) sets OBJ_G2_GRACE_MS.
test_expect_success 'GC keeps a draining object until its grace period is over' '
	nrs_umount &&
	nrs_mount -o "$FAST,gc_grace_ms=${OBJ_G2_GRACE_MS:-4000}$OBJ_OPTS" &&
	head -c 600000 /dev/urandom >"$TRASH/blob.g" &&
	cp "$TRASH/blob.g" "$MNT/m/g" &&
	nrs_wait_for 20 nrs_materialized "$MNT/m/g" &&
	object_files_of "$MNT/m/g" >"$TRASH/files.g" &&
	test -s "$TRASH/files.g" &&
	rm "$MNT/m/g" &&
	nrs_wait_for 10 metric_ge gc_draining_bytes 1 &&
	sleep 1.5 &&
	all_exist "$TRASH/files.g" &&
	nrs_wait_for 15 none_exist "$TRASH/files.g" &&
	nrs_wait_for 5 metric_is gc_draining_bytes 0
'

test_expect_success 'clean unmount' '
	nrs_umount
'
