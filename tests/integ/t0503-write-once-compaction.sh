#!/bin/sh
test_description='write once: compaction merges small copied objects around adopted generations and never copies an adopted one (compaction.c CP3)'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# One stream: runs of 39 small records (copied, in tiny objects) between
# 1 MiB records (adopted in place from sealed 8 MiB segments).  compact_size
# 8 MiB: a run may grow to 2 MiB of small objects, and a 1 MiB generation
# is small enough by size to join one -- only CP3 keeps it out.
OPTS="write_once=auto,materialize_bytes=16384,materialize_age_ms=100,object_size=65536,compact_size=8388608,gc_grace_ms=500,wal_segment_size=8388608"
S=$MNT/s
acks=$TRASH/acks

adopt_lines () {
	nrs_xattr "$S" user.nereus.index | grep " adopt:w/"
}
# CP1's fixpoint, as in compaction.sh: no two copied objects below 2 MiB
# are neighbours, everything is materialized
settled () {
	nrs_settled "$S" 2097152
}
gc_done () {
	[ "$(nrs_metric gc_draining_bytes)" = 0 ]
}

test_expect_success 'small objects merge, adopted generations stay where they are' '
	nrs_mount -o "$OPTS" &&
	nrs-appender -t 1 -n 240 -s 2000-3000 -E 40 -a "$acks" "$S" &&
	{ nrs_wait_for 60 settled ||
	  { nrs_xattr "$S" user.nereus.index | sed "s/^/# /"; false; }; } &&
	nrs_wait_for 20 gc_done &&
	nrs_xattr "$S" user.nereus.index | sed "s/^/# /" &&
	adopted=$(nrs_metric object_adopted_total) &&
	echo "# $adopted adopted, $(nrs_metric compactions_total) compactions" &&
	test "$adopted" -ge 2 &&
	test "$(nrs_metric compactions_total)" -ge 1 &&
	test "$(adopt_lines | wc -l)" -eq "$adopted" &&
	nrs_verify_records -c -a "$acks" "$S"
'

test_expect_success 'remount: the same adopted generations, the same bytes' '
	adopt_lines >"$TRASH/before" &&
	nrs_umount &&
	nrs_mount -o "$OPTS" &&
	adopt_lines >"$TRASH/after" &&
	test_cmp "$TRASH/before" "$TRASH/after" &&
	nrs_verify_records -c -a "$acks" "$S"
'

# lifecycle.c G6, G7: once the WAL let go of its names, GC punches the
# adopted records of the unlinked stream and deletes their files.
w_files () {
	find "$DATA/objects/w" -type f 2>/dev/null | wc -l
}
all_gone () {
	[ "$(w_files)" = 0 ] &&
	[ "$(find "$DATA/objects/s" -type f 2>/dev/null | wc -l)" = 0 ] &&
	gc_done
}
test_expect_success 'unlink: GC deletes the adopted files and the objects' '
	test "$(w_files)" -ge 1 &&
	rm "$S" &&
	{ nrs_wait_for 60 all_gone ||
	  { find "$DATA/objects" "$DATA/wal" -type f | sed "s/^/# /"; false; }; } &&
	test "$(nrs_metric gc_deleted_objects_total)" -ge "$(wc -l <"$TRASH/before")" &&
	kib=$(du -sk "$DATA/objects" | cut -f1) &&
	echo "# objects: $kib KiB after the unlink settled" &&
	nrs_umount
'

test_done
