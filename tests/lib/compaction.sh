# compaction.sh - the compaction tests, run once per object store
# provider: sourced by t0610-compaction.sh (embedded store) and
# t0615-compaction-s3.sh (S3) after lib.sh and the provider's file, which
# sets OBJ_OPTS and obj_files (objlib.sh says what each is).
#
# What it checks (compaction.c CP1-CP2, lifecycle.c G1-G2): small objects
# merge into larger ones while appends and whole-stream reads go on, and no
# byte read ever changes; GC deletes the replaced objects after the grace
# period, so the store holds as many objects as the index names; large
# objects are not rewritten when idle; remount reads the same bytes.
#
# Tiny objects (materialize at 16 KiB or 100 ms, at most 64 KiB each),
# merged below 256 KiB into objects of at most 1 MiB.
OPTS="materialize_bytes=16384,materialize_age_ms=100,object_size=65536,compact_size=1048576,gc_grace_ms=500,wal_segment_size=1048576$OBJ_OPTS"

S=$MNT/k/s
acks=$TRASH/acks

# index lines of objects (start end gen key), and their count
obj_lines () {
	nrs_xattr "$S" user.nereus.index | grep " obj:"
}
test_gc_done () {
	[ "$(nrs_metric gc_draining_bytes)" = 0 ] &&
	[ "$(nrs_metric gc_deleted_objects_total)" -ge "$(nrs_metric compacted_objects_total)" ]
}
# CP1's fixpoint once the stream is idle (10 x materialize_age_ms without a
# commit: the short runs of small objects merge too): no two objects below
# 256 KiB are neighbours, everything is materialized, nothing more is to
# be done.  A small object alone between large ones is never merged (a run
# is two objects at least), so their number is left to the timing of the
# materializer: under ASan five of them were seen.
settled () {
	nrs_settled "$S" 262144
}

test_expect_success 'appends and reads run while small objects are merged' '
	nrs_mount -o "$OPTS" &&
	mkdir "$MNT/k" &&
	: >"$S" &&
	nrs_bg nrs-appender -t 2 -d 6 -s 33-3000 -w 10 -a "$acks" "$S" &&
	app=$NRS_LAST_BG &&
	reads=0 &&
	: >"$TRASH/prev" &&
	while kill -0 "$app" 2>/dev/null; do
		# what was read once must read the same ever after (I2)
		dd if="$S" iflag=direct bs=1M status=none >"$TRASH/cur" &&
		n=$(stat -c %s "$TRASH/prev") &&
		head -c "$n" "$TRASH/cur" | cmp - "$TRASH/prev" ||
			{ echo "bytes changed under compaction (read $reads)"; return 1; }
		mv "$TRASH/cur" "$TRASH/prev" &&
		reads=$((reads + 1))
	done &&
	nrs_wait "$app" 30 &&
	echo "# $reads whole-stream reads during the run" &&
	test "$reads" -gt 2 &&
	{ nrs_wait_for 40 settled || { obj_lines | sed "s/^/# /"; false; }; } &&
	test "$(nrs_metric compactions_total)" -ge 1 &&
	test "$(nrs_metric compacted_objects_total)" -ge 4 &&
	nrs_verify_records -c -a "$acks" "$S" &&
	obj_lines | sed "s/^/# /"
'

test_expect_success 'the replaced objects are deleted after the grace period' '
	nrs_wait_for 10 test_gc_done &&
	n=$(obj_lines | wc -l) &&
	test "$(obj_files | wc -l)" = "$n"
'

test_expect_success 'large objects are not rewritten again: nothing changes when idle' '
	nrs_wait_for 20 settled &&
	sleep 1 &&
	obj_lines >"$TRASH/before" &&
	c=$(nrs_metric compactions_total) &&
	sleep 2 &&
	obj_lines >"$TRASH/after" &&
	test_cmp "$TRASH/before" "$TRASH/after" &&
	test "$(nrs_metric compactions_total)" = "$c"
'

test_expect_success 'remount: the same bytes, from the compacted objects' '
	nrs_umount &&
	nrs_mount -o "$OPTS" &&
	nrs_verify_records -c -a "$acks" "$S" &&
	obj_lines >"$TRASH/again" &&
	test_cmp "$TRASH/after" "$TRASH/again" &&
	nrs_umount
'
