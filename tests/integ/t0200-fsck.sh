#!/bin/sh
test_description='nereusfs-fsck: a clean data directory, each kind of damage, --repair, objects, the lifecycle'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

FSCK=${NRS_FSCK:-$nrs_top/nereusfs-fsck}
[ -x "$FSCK" ] || nrs_error "no checker at $FSCK (run make)"
command -v sqlite3 >/dev/null 2>&1 ||
	nrs_error "missing tool sqlite3 (contrib/ has the dependency installer)"

SEG1=wal/0000000000000001.seg
SEG2=wal/0000000000000002.seg

# obj_range KEY: "START END" of the object KEY in the saved index of /o/b
# (object boundaries depend on timing).
obj_range () {
	grep " obj:$1\$" "$TRASH/oindex" | cut -d" " -f1,2
}

# damaged NAME [FROM]: a fresh copy of the clean data directory (or of
# FROM), in $D.
damaged () {
	D=$TRASH/$1 &&
	rm -rf "$D" &&
	cp -a "${2:-$TRASH/clean}" "$D"
}

# flip FILE OFFSET: invert one byte.
flip () {
	python3 -c 'import sys
f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); b = f.read(1)
f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0xff]))' "$1" "$2"
}

sums () {
	(cd "$1" && find . -type f | sort | xargs sha256sum)
}

test_expect_success 'a data directory: two streams, two WAL segments' '
	nrs_mount &&
	mkdir "$MNT/k" &&
	for i in 1 2 3; do head -c 5000 /dev/urandom >>"$MNT/k/a" || return 1; done &&
	for i in 1 2; do head -c 3000 /dev/urandom >>"$MNT/k/b" || return 1; done &&
	nrs_remount &&
	head -c 2000 /dev/urandom >>"$MNT/k/b" &&
	nrs_umount &&
	test -f "$DATA/$SEG1" && test -f "$DATA/$SEG2" &&
	cp -a "$DATA" "$TRASH/clean"
'

test_expect_success 'clean: exit 0, and not a byte changes' '
	sums "$DATA" >"$TRASH/before" &&
	fsck_expect 0 "$DATA" -- "0 inconsistencies" &&
	sums "$DATA" >"$TRASH/after" &&
	test_cmp "$TRASH/before" "$TRASH/after"
'

test_expect_success 'refused while the daemon runs (exit 2)' '
	nrs_mount &&
	fsck_expect 2 "$DATA" -- "is in use" &&
	fsck_expect 2 "$DATA" --repair -- "unmount it first" &&
	nrs_umount &&
	fsck_expect 2 "$TRASH/nonexistent" -- "cannot check"
'

test_expect_success 'a flipped byte in a record payload' '
	damaged payload &&
	flip "$D/$SEG1" $((64 + 68 + 10)) &&
	fsck_expect 1 "$D" -- \
		"F4 $SEG1 bytes [64, " "): record LSN 1: payload chunk 0 fails its CRC32C" \
		"F10 stream 1 (/k/a): committed bytes [0, " ") fail their CRC32C in $SEG1 at 64 (LSN 1)"
'

test_expect_success 'a flipped byte in a record header' '
	damaged header &&
	flip "$D/$SEG1" $((64 + 16)) &&
	fsck_expect 1 "$D" -- \
		"F4 $SEG1 bytes [64, " "): corrupt: no record header verifies" \
		"F9 stream 1 (/k/a): commit chain broken: LSN 1 is not in the WAL: committed bytes [0, "
'

test_expect_success 'zeros after the last record (written ahead, left by a crash): no damage' '
	damaged zeros &&
	head -c 70000 /dev/zero >>"$D/$SEG2" &&
	head -c 5000 /dev/zero >>"$D/$SEG1" &&
	fsck_expect 0 "$D" -- "0 inconsistencies"
'

test_expect_success 'garbage after the last record: a torn tail, cut by --repair' '
	damaged garbage &&
	size=$(stat -c %s "$D/$SEG2") &&
	head -c 3000 /dev/urandom >>"$D/$SEG2" &&
	sums "$D" >"$TRASH/before" &&
	fsck_expect 1 "$D" -- \
		"F5 $SEG2 bytes [$size, $((size + 3000))): torn tail (3000 bytes)" &&
	sums "$D" >"$TRASH/after" &&
	test_cmp "$TRASH/before" "$TRASH/after" &&
	fsck_expect 0 "$D" --repair -- \
		"repaired: cut the torn tail of $SEG2 at byte $size (3000 bytes)" &&
	test "$(stat -c %s "$D/$SEG2")" = "$size" &&
	fsck_expect 0 "$D" -- "0 inconsistencies"
'

test_expect_success 'a record cut short: torn, but committed, so not cut' '
	damaged cut &&
	size=$(stat -c %s "$D/$SEG2") &&
	truncate -s $((size - 7)) "$D/$SEG2" &&
	fsck_expect 1 "$D" -- \
		"F5 $SEG2 bytes [64, $((size - 7))): torn tail" \
		"F9 stream 2 (/k/b): commit chain broken: LSN " \
		"is not in the WAL: committed bytes [6000, 8000) cannot be reached" &&
	fsck_expect 1 "$D" --repair -- "not repaired: the torn WAL tail stays" &&
	test "$(stat -c %s "$D/$SEG2")" = $((size - 7))
'

test_expect_success 'a deleted WAL segment' '
	damaged noseg &&
	rm "$D/$SEG1" &&
	fsck_expect 1 "$D" -- \
		"F9 stream 1 (/k/a): commit chain broken: LSN " \
		"is not in the WAL: committed bytes [0, 15000) cannot be reached" \
		"is not in the WAL: committed bytes [0, 6000) cannot be reached"
'

test_expect_success 'a head moved in SQLite' '
	damaged head &&
	sqlite3 "$D/meta.db" "UPDATE streams SET head = head + 10 WHERE id = 1" &&
	reseal "$D/meta.db" &&
	fsck_expect 1 "$D" -- \
		"F9 stream 1 (/k/a): commit chain broken: LSN " \
		"holds stream 1 bytes [" ", 15000), but the head is at 15010"
'

test_expect_success 'a stale version' '
	damaged version &&
	sqlite3 "$D/meta.db" "UPDATE streams SET version = version - 1 WHERE id = 2" &&
	reseal "$D/meta.db" &&
	fsck_expect 1 "$D" -- \
		"F12 stream 2 (/k/b): version " ", but the commit chain holds "
'

test_expect_success 'a stream row that fails its checksum: F27 alone' '
	damaged crc &&
	sqlite3 "$D/meta.db" "UPDATE streams SET epoch = epoch + 1 WHERE id = 2" &&
	fsck_expect 1 "$D" --repair -- \
		"F27 stream 2 (/k/b): its row in meta.db fails its checksum" \
		"1 inconsistencies"
'

test_expect_success 'a dangling dirent' '
	damaged dirent &&
	sqlite3 "$D/meta.db" "INSERT INTO dirents(parent, name, ino) VALUES(1, CAST(\"ghost\" AS BLOB), 99999)" &&
	fsck_expect 1 "$D" --repair -- \
		"F15 dirent 1/\"ghost\": points at inode 99999, which does not exist"
'

test_expect_success 'an inode with nlink 0: forgotten by --repair' '
	damaged unlinked &&
	ino=$(sqlite3 "$D/meta.db" "SELECT ino FROM streams WHERE id = 2") &&
	sqlite3 "$D/meta.db" "DELETE FROM dirents WHERE ino = $ino;
		UPDATE inodes SET nlink = 0, parent = 0 WHERE ino = $ino;
		UPDATE streams SET unlinked = 1 WHERE id = 2" &&
	reseal "$D/meta.db" &&
	fsck_expect 1 "$D" -- "F19 inode $ino (stream 2): unlinked (nlink 0)" &&
	fsck_expect 0 "$D" --repair -- \
		"repaired: forgot unlinked inode $ino (stream 2)" &&
	fsck_expect 0 "$D" -- "0 inconsistencies"
'

test_expect_success 'the repaired copies mount and read back' '
	rm -rf "$DATA" && cp -a "$TRASH/garbage" "$DATA" &&
	nrs_mount &&
	test "$(stat -c %s "$MNT/k/a")" = 15000 &&
	test "$(stat -c %s "$MNT/k/b")" = 8000 &&
	cat "$MNT/k/a" "$MNT/k/b" >/dev/null &&
	nrs_umount
'

# ---- the object side (F20-F22) -------------------------------------------

# (compact_size=0: no compaction, so the objects stay those the index named)
FAST="materialize_bytes=65536,materialize_age_ms=200,object_size=262144,wal_segment_size=1048576,compact_size=0"

test_expect_success 'objects: materialized, WAL segments reclaimed, and clean' '
	rm -rf "$DATA" &&
	nrs_mount -o "$FAST" &&
	mkdir "$MNT/o" &&
	head -c 3000000 /dev/urandom >"$TRASH/blob" &&
	dd if="$TRASH/blob" of="$MNT/o/b" bs=65536 oflag=append conv=notrunc status=none &&
	n=0 &&
	until [ "$(nrs_xattr "$MNT/o/b" user.nereus.materialized)" = 3000000 ]; do
		[ $n -lt 200 ] || { echo "not materialized after 20 s"; return 1; }
		sleep 0.1; n=$((n + 1))
	done &&
	nrs_xattr "$MNT/o/b" user.nereus.index >"$TRASH/oindex" &&
	sed -n "s/^[0-9]* [0-9]* [0-9]* obj://p" "$TRASH/oindex" >"$TRASH/okeys" &&
	nkeys=$(wc -l <"$TRASH/okeys") &&
	test "$nkeys" -ge 11 &&
	n=0 &&
	while { [ -e "$DATA/$SEG1" ] || [ -e "$DATA/$SEG2" ]; } && [ $n -lt 100 ]; do
		sleep 0.1; n=$((n + 1))
	done &&
	nrs_umount &&
	test ! -e "$DATA/$SEG1" && test ! -e "$DATA/$SEG2" &&
	sums "$DATA" >"$TRASH/before" &&
	fsck_expect 0 "$DATA" -- "0 inconsistencies" "$nkeys objects verified" &&
	sums "$DATA" >"$TRASH/after" &&
	test_cmp "$TRASH/before" "$TRASH/after" &&
	cp -a "$DATA" "$TRASH/objclean"
'

test_expect_success 'a flipped byte in an object: reported with its key' '
	damaged objflip "$TRASH/objclean" &&
	key=$(sed -n 2p "$TRASH/okeys") &&
	file=$D/objects/$key &&
	size=$(stat -c %s "$file") &&
	set -- $(obj_range "$key") &&
	nb=$((($2 - $1 + 65535) / 65536)) &&
	flip "$file" $((size - 5000)) &&
	fsck_expect 1 "$D" -- \
		"F21 object $key (stream 1 (/o/b), bytes [$1, $2), committed): 1 of its $nb payload blocks fail their CRC32C" &&
	fsck_expect 0 "$D" --no-objects -- "0 inconsistencies" &&
	sums "$D" >"$TRASH/before" &&
	fsck_expect 1 "$D" --repair -- "F21 object $key" &&
	sums "$D" >"$TRASH/after" &&
	test_cmp "$TRASH/before" "$TRASH/after"
'

test_expect_success 'a deleted object: reported with its key' '
	damaged objgone "$TRASH/objclean" &&
	key=$(sed -n 3p "$TRASH/okeys") &&
	set -- $(obj_range "$key") &&
	rm "$D/objects/$key" &&
	fsck_expect 1 "$D" -- \
		"F21 object $key (stream 1 (/o/b), bytes [$1, $2), committed): missing from the object store"
'

test_expect_success 'an upload intent left by a crash is pending, not an error' '
	damaged objintent "$TRASH/objclean" &&
	sqlite3 "$D/meta.db" "INSERT INTO objects(stream_id, start, end, length, sha256, state, ctime_ns, mtime_ns)
		SELECT stream_id, start, end, length, sha256, 1, ctime_ns, ctime_ns FROM objects ORDER BY gen DESC LIMIT 1" &&
	fsck_expect 0 "$D" -- "prepared): an upload intent" "0 inconsistencies, 1 pending"
'

test_expect_success 'an object store that cannot be reached: exit 2' '
	(
		AWS_ACCESS_KEY_ID=fsck && AWS_SECRET_ACCESS_KEY=fsck-secret &&
		export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY &&
		fsck_expect 2 "$TRASH/objclean" --s3=http://127.0.0.1:9/bucket -- \
			"cannot read the objects in http://127.0.0.1:9/bucket"
	) &&
	fsck_expect 2 "$TRASH/objclean" --s3-ca=/dev/null -- "usage:"
'

test_expect_success 'the checked copy mounts and reads back' '
	rm -rf "$DATA" && cp -a "$TRASH/objclean" "$DATA" &&
	nrs_mount -o "$FAST" &&
	cmp "$TRASH/blob" "$MNT/o/b" &&
	nrs_umount
'

# ---- the lifecycle (F23-F26) ---------------------------------------------

# The same, with a GC grace period short enough to wait out.
GC="$FAST,gc_grace_ms=200"

metric_ge () { # NAME N
	[ "$(nrs_metric "$1")" -ge "$2" ]
}
metric_is () { # NAME VALUE
	[ "$(nrs_metric "$1")" = "$2" ]
}
xattr_is () { # FILE NAME VALUE
	[ "$(nrs_xattr "$1" "$2")" = "$3" ]
}
started_past () { # FILE N
	[ "$(nrs_xattr "$1" user.nereus.start)" -gt "$2" ]
}

test_expect_success 'lifecycle: retention trims, GC deletes, and fsck is clean' '
	rm -rf "$DATA" &&
	nrs_mount -o "$GC" &&
	mkdir "$MNT/l" &&
	head -c 2000000 /dev/urandom >"$TRASH/lblob" &&
	dd if="$TRASH/lblob" of="$MNT/l/r" bs=65536 oflag=append conv=notrunc status=none &&
	nrs_wait_for 20 xattr_is "$MNT/l/r" user.nereus.materialized 2000000 &&
	before=$(nrs_objects) &&
	setfattr -n user.nereus.retention.bytes -v 1000000 "$MNT/l/r" &&
	nrs_wait_for 10 started_past "$MNT/l/r" 0 &&
	nrs_wait_for 10 metric_ge gc_deleted_objects_total 1 &&
	nrs_wait_for 10 metric_is gc_draining_bytes 0 &&
	echo "# start $(nrs_xattr "$MNT/l/r" user.nereus.start), $before objects before, $(nrs_objects) after" &&
	test "$(nrs_objects)" -lt "$before" &&
	nrs_xattr "$MNT/l/r" user.nereus.index >"$TRASH/lindex" &&
	nrs_umount &&
	test "$(sqlite3 "$DATA/meta.db" "SELECT count(*) FROM objects WHERE state = 4")" -ge 1 &&
	sums "$DATA" >"$TRASH/before" &&
	fsck_expect 0 "$DATA" --gc-grace-ms=200 -v -- \
		"0 inconsistencies, 0 pending" "retired): deleted by GC" &&
	sums "$DATA" >"$TRASH/after" &&
	test_cmp "$TRASH/before" "$TRASH/after" &&
	cp -a "$DATA" "$TRASH/lcclean"
'

test_expect_success 'a stray object file older than the grace period: exit 1, named' '
	damaged lcstray "$TRASH/lcclean" &&
	stray=s/00000000000000ff/0000000000000000-0000000000001000-g00000000000000ff &&
	mkdir -p "$D/objects/${stray%/*}" &&
	head -c 4096 /dev/urandom >"$D/objects/$stray" &&
	touch -d "2 minutes ago" "$D/objects/$stray" &&
	fsck_expect 1 "$D" -- \
		"F26 objects/$stray: an unreferenced object: no row of the objects table names it" \
		"1 inconsistencies" &&
	fsck_expect 0 "$D" --gc-grace-ms=3600000 -- \
		"F26 objects/$stray: no row of the objects table names it, but it was written only 2 min" \
		"0 inconsistencies, 1 pending" &&
	fsck_expect 1 "$D" --repair -- \
		"not repaired: 1 stored objects that nothing will delete stay" &&
	test -f "$D/objects/$stray" &&
	fsck_expect 2 "$D" --gc-grace-ms=soon -- "--gc-grace-ms must be a number"
'

test_expect_success 'a row retired while its object is still stored: exit 1' '
	damaged lcretired "$TRASH/lcclean" &&
	set -- $(head -1 "$TRASH/lindex") &&
	key=${4#obj:} && gen=$3 &&
	test -f "$D/objects/$key" &&
	sqlite3 "$D/meta.db" "UPDATE objects SET state = 4 WHERE gen = $gen AND state = 2" &&
	fsck_expect 1 "$D" -- \
		"F25 object $key (stream 1 (/l/r), bytes [$1, $2), retired): retired but still stored" &&
	test -f "$D/objects/$key"
'

test_expect_success 'the checked lifecycle copy mounts and reads back what is kept' '
	rm -rf "$DATA" && cp -a "$TRASH/lcclean" "$DATA" &&
	nrs_mount -o "$GC" &&
	start=$(nrs_xattr "$MNT/l/r" user.nereus.start) &&
	dd if="$MNT/l/r" iflag=skip_bytes skip="$start" status=none >"$TRASH/ltail" &&
	dd if="$TRASH/lblob" bs=65536 iflag=skip_bytes skip="$start" status=none | cmp - "$TRASH/ltail" &&
	nrs_umount
'

test_done
