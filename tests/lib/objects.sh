# objects.sh - the materialization tests, run once per object store
# provider: sourced by t0500-objects-dir.sh and t0510-objects-s3.sh after
# lib.sh and the provider's file, which sets OBJ_OPTS, OBJ_STORE, obj_file
# and obj_files, and maybe obj_sync and obj_write_back (objlib.sh says what
# each is); t0530-objects-moto.sh runs it on moto_server.
#
# What it checks (issue 4): appends materialize and `materialized` reaches
# the head; WAL bytes drop (segments reclaimed); bytes read back identical
# after remount, also with the WAL segments gone; a corrupted object reads
# EIO on its range, never wrong bytes; a crash at every step of
# materialize / publish / reclaim converges on remount with no orphan left
# and nothing lost.

. "$nrs_lib/objlib.sh"

S=$MNT/k/s
acks=$TRASH/acks

test_expect_success 'appends materialize: materialized reaches the head' '
	nrs_mount -o "$FAST$OBJ_OPTS" &&
	mkdir "$MNT/k" &&
	nrs-appender -t 4 -n 300 -s 33-8000 -w 100 -a "$acks" "$S" "$MNT/k/t" &&
	head -c 3000000 /dev/urandom >"$TRASH/blob" &&
	dd if="$TRASH/blob" of="$MNT/k/b" bs=65536 oflag=append conv=notrunc status=none &&
	wait_materialized "$S" "$MNT/k/t" "$MNT/k/b" &&
	test "$(nrs_xattr "$S" user.nereus.wal_bytes)" = 0 &&
	index_keys "$MNT/k/b" >"$TRASH/keys.b" &&
	test "$(wc -l <"$TRASH/keys.b")" -ge 11 &&
	! nrs_xattr "$MNT/k/b" user.nereus.index | grep -q " wal:" &&
	test "$(metric object_uploads_total)" -ge 11 &&
	nrs_verify_records -c -a "$acks" "$S" "$MNT/k/t" &&
	cmp "$TRASH/blob" "$MNT/k/b"
'

test_expect_success 'WAL segments whose ranges moved are reclaimed' '
	n=0 &&
	while [ "$(metric wal_reclaimed_segments_total)" -lt 2 ] && [ $n -lt 100 ]; do
		sleep 0.1; n=$((n + 1))
	done &&
	test "$(metric wal_reclaimed_bytes_total)" -gt 2000000 &&
	test "$(metric wal_bytes)" -lt 2100000 &&
	test "$(wal_files)" -le 2 &&
	grep "\"store\": \"$OBJ_STORE\"" "$MNT/.nereus/status"
'

test_expect_success 'every object named by an index is stored, with no other' '
	objects_match "$S" "$MNT/k/t" "$MNT/k/b"
'

test_expect_success 'remount: identical bytes, served from objects alone' '
	nrs_umount &&
	nrs_mount -o "$FAST$OBJ_OPTS" &&
	nrs_verify_records -c -a "$acks" "$S" "$MNT/k/t" &&
	cmp "$TRASH/blob" "$MNT/k/b" &&
	nrs_check_head "$S" "$MNT/k/t" "$MNT/k/b" &&
	test "$(nrs_xattr "$MNT/k/b" user.nereus.materialized)" = 3000000 &&
	test "$(metric object_get_requests_total)" -gt 0 &&
	dd if="$MNT/k/b" iflag=skip_bytes,count_bytes skip=1000000 count=70000 \
		status=none >"$TRASH/mid" &&
	dd if="$TRASH/blob" bs=1 skip=1000000 count=70000 status=none | cmp - "$TRASH/mid"
'

test_expect_success 'appends go on after remount and materialize too' '
	nrs-appender -t 2 -n 100 -s 33-4000 -w 200 -a "$acks" "$S" "$MNT/k/t" &&
	wait_materialized "$S" "$MNT/k/t" &&
	nrs_verify_records -c -a "$acks" "$S" "$MNT/k/t"
'

# The good bytes before the damaged object are read with O_DIRECT: through
# the page cache, readahead may put them in one request with damaged ones,
# and a request that meets damage fails whole (a short reply would tell the
# kernel the file ends there).
test_expect_success 'a corrupted object: EIO on its range, never wrong bytes' '
	key=$(sed -n 2p "$TRASH/keys.b") &&
	obj_sync &&
	file=$(obj_file "$key") &&
	set -- $(nrs_xattr "$MNT/k/b" user.nereus.index | grep "obj:$key\$") &&
	ostart=$1 && oend=$2 &&
	nrs_umount &&
	size=$(stat -c %s "$file") &&
	off=$((size - 5000)) &&
	orig=$(dd if="$file" bs=1 skip="$off" count=1 status=none | od -An -tu1 | tr -d " ") &&
	printf "$(printf "\\\\%03o" $(( orig ^ 0x40 )))" |
		dd of="$file" bs=1 seek="$off" count=1 conv=notrunc status=none &&
	obj_write_back "$key" &&
	nrs_mount -o "$FAST$OBJ_OPTS" &&
	expect_errno EIO pread "$MNT/k/b" $((oend - 5000)) 100 &&
	test_must_fail cmp "$TRASH/blob" "$MNT/k/b" &&
	dd if="$TRASH/blob" bs=1 count="$ostart" status=none >"$TRASH/head.b" &&
	dd if="$MNT/k/b" iflag=direct bs=4096 count=$((ostart / 4096)) status=none |
		cmp - "$TRASH/head.b" &&
	grep "stream [0-9]* offset [0-9]*: object $key fails its checksum" "$LOG" &&
	nrs_verify_records -c -a "$acks" "$S" "$MNT/k/t" &&
	nrs_umount &&
	printf "$(printf "\\\\%03o" "$orig")" |
		dd of="$file" bs=1 seek="$off" count=1 conv=notrunc status=none &&
	obj_write_back "$key" &&
	nrs_mount -o "$FAST$OBJ_OPTS" &&
	cmp "$TRASH/blob" "$MNT/k/b"
'

# One materializer thread builds the next object of a stream while the one
# before is uploaded (mat_worker.c MW1-MW3).  A publish that fails must
# hold back the object built after it: published first, it would move
# `materialized` past a range no object holds, and the next mount, which
# walks the WAL only above `materialized`, would lose that range.
test_expect_success 'build-ahead: a failed publish holds back the next object, nothing is lost' '
	nrs_umount &&
	nrs_mount -o "materialize_bytes=1073741824,materialize_age_ms=3600000,compact_size=0$OBJ_OPTS" &&
	head -c 2000000 /dev/urandom >"$TRASH/ahead" &&
	dd if="$TRASH/ahead" of="$MNT/k/a" bs=65536 oflag=append conv=notrunc status=none &&
	nrs_umount &&
	NRS_FAILPOINTS=obj.before_publish=error:EIO@2 &&
	export NRS_FAILPOINTS &&
	nrs_mount -o "materializers=1,$FAST$OBJ_OPTS" &&
	unset NRS_FAILPOINTS &&
	wait_materialized "$MNT/k/a" &&
	nrs_log_since_mount | grep "failpoint obj.before_publish: error .* at hit 2" &&
	test "$(index_keys "$MNT/k/a" | wc -l)" -ge 7 &&
	cmp "$TRASH/ahead" "$MNT/k/a" &&
	nrs_umount &&
	nrs_mount -o "$FAST$OBJ_OPTS" &&
	cmp "$TRASH/ahead" "$MNT/k/a" &&
	n=0 &&
	until nrs_log_since_mount | grep "removed orphan object"; do
		[ $n -lt 100 ] || return 1
		sleep 0.1; n=$((n + 1))
	done &&
	objects_match "$S" "$MNT/k/t" "$MNT/k/b" "$MNT/k/a"
'

# A crash at each step of materialize / publish / reclaim, under load:
# remount converges (everything acknowledged there, byte-exact; every
# intent resolved; no object stored that no index names).
crash_acks=
crash_point () { # POINT WRITER-BASE
	local app arc
	crash_acks="$crash_acks -a $TRASH/ack.$1" &&
	nrs_umount &&
	NRS_FAILPOINTS="$1=crash" &&
	export NRS_FAILPOINTS &&
	nrs_mount -o "$FAST$OBJ_OPTS" &&
	unset NRS_FAILPOINTS &&
	nrs_bg nrs-appender -t 2 -d 20 -s 33-8000 -w "$2" \
		-a "$TRASH/ack.$1" "$MNT/k/c1" "$MNT/k/c2" >"$TRASH/app.$1" 2>&1 &&
	app=$NRS_LAST_BG &&
	n=0 &&
	while kill -0 "$NRS_PID" 2>/dev/null; do
		[ $n -lt 200 ] || { echo "daemon alive after 20 s"; return 1; }
		sleep 0.1; n=$((n + 1))
	done &&
	nrs_kill9 &&
	{ nrs_wait $app 30; arc=$?; } &&
	test "$arc" = 3 &&
	grep "failpoint $1: crash at hit [0-9]*\$" "$LOG" &&
	nrs_mount -o "$FAST$OBJ_OPTS" &&
	case $1 in
	obj.after_put|obj.before_publish)	# an upload, never published
		n=0 &&
		until nrs_log_since_mount | grep "removed orphan object"; do
			[ $n -lt 100 ] || return 1
			sleep 0.1; n=$((n + 1))
		done ;;
	esac &&
	nrs_verify_records -u 1 $crash_acks "$MNT/k/c1" "$MNT/k/c2" &&
	wait_materialized "$S" "$MNT/k/t" "$MNT/k/b" "$MNT/k/c1" "$MNT/k/c2" &&
	nrs_verify_records -u 1 $crash_acks "$MNT/k/c1" "$MNT/k/c2" &&
	nrs_verify_records -c -a "$acks" "$S" "$MNT/k/t" &&
	cmp "$TRASH/blob" "$MNT/k/b" &&
	for f in "$S" "$MNT/k/t" "$MNT/k/b" "$MNT/k/a" "$MNT/k/c1" "$MNT/k/c2"; do
		index_keys "$f" || return 1
	done | sort >"$TRASH/keys.all" &&
	n=0 &&
	while [ "$(obj_files | wc -l)" != "$(wc -l <"$TRASH/keys.all")" ] && [ $n -lt 100 ]; do
		sleep 0.1; n=$((n + 1))
	done &&
	test "$(obj_files | wc -l)" = "$(wc -l <"$TRASH/keys.all")" &&
	test "$(metric wal_segments)" -le 3
}

w=300
for point in obj.before_put obj.after_put obj.before_publish obj.after_publish wal.before_reclaim; do
	test_expect_success "crash at $point under load: remount converges, nothing lost" "
		crash_point $point $w
	"
	w=$((w + 10))
done

test_expect_success 'clean unmount at the end' '
	nrs_umount
'
