#!/bin/sh
test_description='space of dead WAL records comes back on an idle mount: the current segment is sealed once it holds no live record and reclaimed (wal_local_seg.c WD2, walgc.c MZ7); a crash right after the seal, or right after the reclaim, loses nothing acknowledged'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# The default 64 MiB segments (so that everything written stays in the
# current segment, which MZ5 never deletes), small objects, no compaction
# (no draining copies), a short GC grace.  Copying (write_once=off): the
# rules here are the copying path's, a WAL segment that goes once every
# record in it is an object; with write once the builder seals a segment
# that holds a large record (mat_adopt.c MZ10) and the segment lives on as
# an object, which t0502 and t0503 test.
NRS_MOUNT_OPTS="-o write_once=off${NRS_MOUNT_OPTS:+ $NRS_MOUNT_OPTS}"
OPTS="materialize_bytes=65536,materialize_age_ms=200,object_size=262144,compact_size=0,gc_grace_ms=300"
keeps="$MNT/k/keep0 $MNT/k/keep1"

# Bytes in the files under DIR (du -sb without the directories' own size).
file_bytes () {
	find "$1" -path "$1/.tmp" -prune -o -type f -printf '%s\n' 2>/dev/null |
		awk '{ s += $1 } END { print s + 0 }'
}
stored () {
	echo $(($(file_bytes "$DATA/wal") + $(file_bytes "$DATA/objects")))
}
all_materialized () {
	for f in "$@"; do nrs_materialized "$f" || return 1; done
}
# The live bytes: what the streams still hold above their start.
live () {
	local n=0 f
	for f in $(find "$MNT" -path "$MNT/.nereus" -prune -o -type f -print); do
		n=$((n + $(nrs_xattr "$f" user.nereus.head) - $(nrs_xattr "$f" user.nereus.start)))
	done
	echo $n
}
# The documented bound (README, nereusfs(8)): on an idle mount, within
# materialize_age_ms + gc_grace_ms + about a second, the WAL directory and
# the objects hold the live bytes, one empty 64-byte segment header, and
# per object its headers (objfmt: 72 bytes + 4 per 64 KiB block; the
# embedded store's 64): 256 bytes an object is more than enough here.
within_bound () {
	local s l nobj
	s=$(stored) && l=$(live) &&
	nobj=$(find "$DATA/objects" -path "$DATA/objects/.tmp" -prune -o -type f -print | wc -l) &&
	[ "$s" -le $((l + 64 + nobj * 256)) ]
}
show () {
	echo "# live $(live) bytes; wal/ $(file_bytes "$DATA/wal") bytes" \
	     "in $(ls "$DATA/wal" | wc -l) files, objects/ $(file_bytes "$DATA/objects")" \
	     "bytes; du -sb: $(du -sb "$DATA/wal" "$DATA/objects" | awk '{ s += $1 } END { print s }')"
}
verify_keeps () {
	nrs_verify_records -c -u 0 -a "$TRASH/ack.1" -a "$TRASH/ack.2" $keeps
}

start_past () { # FILE N
	[ "$(nrs_xattr "$1" user.nereus.start)" -ge "$2" ]
}

# On a fresh data directory the first reclaim that has anything to do is
# the one after the first seal: crash there, between the seal and the
# deletion of the sealed segment.
test_expect_success 'idle mount, everything materialized: the segment is sealed; a crash before its reclaim loses nothing' '
	: >"$TRASH/ack.2" &&
	head -c $((20 << 20)) /dev/urandom >"$TRASH/blob.big" &&
	NRS_FAILPOINTS=wal.before_reclaim=crash && export NRS_FAILPOINTS &&
	nrs_mount -o "$OPTS" &&
	unset NRS_FAILPOINTS &&
	mkdir "$MNT/k" &&
	nrs-appender -t 2 -n 300 -s 33-4096 -w 1 -a "$TRASH/ack.1" $keeps &&
	dd if="$TRASH/blob.big" of="$MNT/k/big" bs=1M oflag=append conv=notrunc status=none &&
	nrs_wait_exit 30 &&	# MZ7 sealed it; MZ5 crashed before deleting it
	nrs_kill9 &&
	grep "failpoint wal.before_reclaim: crash at hit 1\$" "$LOG" &&
	test "$(ls "$DATA/wal" | wc -l)" = 2 &&
	test "$(file_bytes "$DATA/wal")" -gt $((20 << 20)) &&
	nrs_mount -o "$OPTS" &&
	verify_keeps &&
	cmp "$MNT/k/big" "$TRASH/blob.big"
'

test_expect_success '20 MiB unlinked: within the GC grace the data directory is back to the live bytes' '
	nrs_wait_for 30 all_materialized $keeps "$MNT/k/big" &&
	rm "$MNT/k/big" &&
	nrs_wait_for 10 within_bound &&
	show &&
	verify_keeps
'

test_expect_success 'more appends; a stream trimmed to its head: back to the bound' '
	nrs-appender -t 2 -n 100 -s 33-4096 -w 101 -a "$TRASH/ack.2" $keeps &&
	head -c $((6 << 20)) /dev/urandom | dd of="$MNT/k/t" bs=1M iflag=fullblock oflag=append conv=notrunc status=none &&
	nrs_wait_for 30 all_materialized $keeps "$MNT/k/t" &&
	setfattr -n user.nereus.trim -v $((6 << 20)) "$MNT/k/t" &&
	nrs_wait_for 10 within_bound &&
	show &&
	test "$(stat -c %s "$MNT/k/t")" = $((6 << 20)) &&
	expect_errno ENODATA pread "$MNT/k/t" $((6 << 20 - 1)) 1 &&
	verify_keeps
'

# materialize_age_ms=8000: the 5 bytes of "small" stay in the WAL for 8 s.
test_expect_success 'retention; live bytes of another stream not yet materialized keep the segment until they are' '
	head -c $((5 << 20)) /dev/urandom | dd of="$MNT/k/r" bs=1M iflag=fullblock oflag=append conv=notrunc status=none &&
	nrs_wait_for 30 nrs_materialized "$MNT/k/r" &&
	nrs_umount &&
	nrs_mount -o "materialize_bytes=65536,materialize_age_ms=8000,object_size=262144,compact_size=0,gc_grace_ms=300" &&
	head -c $((3 << 20)) /dev/urandom | dd of="$MNT/k/r" bs=1M iflag=fullblock oflag=append conv=notrunc status=none &&
	nrs_wait_for 30 nrs_materialized "$MNT/k/r" &&
	echo tail >>"$MNT/k/small" &&
	setfattr -n user.nereus.retention.bytes -v 1 "$MNT/k/r" &&
	nrs_wait_for 10 start_past "$MNT/k/r" $((7 << 20)) &&
	sleep 1 &&
	test "$(nrs_xattr "$MNT/k/small" user.nereus.materialized)" = 0 &&
	test "$(file_bytes "$DATA/wal")" -gt $((3 << 20)) &&	# held by small
	test "$(ls "$DATA/wal" | wc -l)" = 1 &&	# and not sealed: MZ7
	show &&
	nrs_wait_for 20 within_bound &&
	show &&
	test "$(nrs_xattr "$MNT/k/small" user.nereus.materialized)" = 5 &&
	test "$(cat "$MNT/k/small")" = tail
'

test_expect_success 'an idle mount with an empty current segment stays put' '
	sealed=$(nrs_metric wal_sealed_segments_total) &&
	test "$sealed" -ge 1 &&
	segs=$(ls "$DATA/wal") &&
	sleep 1.5 &&
	test "$(ls "$DATA/wal")" = "$segs" &&
	test "$(nrs_metric wal_sealed_segments_total)" = "$sealed"
'

test_expect_success 'kill -9 right after the reclaim: nothing acknowledged lost' '
	nrs_kill9 &&
	nrs_mount -o "$OPTS" &&
	verify_keeps &&
	test "$(cat "$MNT/k/small")" = tail &&
	test "$(stat -c %s "$MNT/k/t")" = $((6 << 20)) &&
	nrs_wait_for 10 within_bound &&
	show &&
	nrs_umount
'

test_done
