#!/bin/sh
test_description='nereusfs-fsck: a clean data directory, each kind of damage, --repair'
. "${NRS_TESTLIB:-$(dirname "$0")/lib.sh}"

FSCK=${NRS_FSCK:-$nrs_top/nereusfs-fsck}
[ -x "$FSCK" ] || nrs_error "no checker at $FSCK (run make)"
command -v sqlite3 >/dev/null 2>&1 ||
	nrs_error "missing tool sqlite3 (contrib/ has the dependency installer)"

SEG1=wal/0000000000000001.seg
SEG2=wal/0000000000000002.seg

# fsck_expect STATUS DIR [--repair] -- PATTERN...: nereusfs-fsck exits with
# STATUS and prints every PATTERN (fixed strings).
fsck_expect () {
	local want=$1 dir=$2 rc
	shift 2
	args=
	while [ "$1" != -- ]; do args="$args $1"; shift; done
	shift
	"$FSCK" $args "$dir" >"$TRASH/fsck.out" 2>&1
	rc=$?
	sed 's/^/| /' "$TRASH/fsck.out"
	if [ "$rc" != "$want" ]; then
		echo "nereusfs-fsck exited $rc, expected $want"
		return 1
	fi
	for p in "$@"; do
		grep -F -e "$p" "$TRASH/fsck.out" >/dev/null ||
			{ echo "missing in the output: $p"; return 1; }
	done
}

# damaged NAME: a fresh copy of the clean data directory, in $D.
damaged () {
	D=$TRASH/$1 &&
	rm -rf "$D" &&
	cp -a "$TRASH/clean" "$D"
}

# flip FILE OFFSET: invert one byte.
flip () {
	python3 -c 'import sys
f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); b = f.read(1)
f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0xff]))' "$1" "$2"
}

# reseal DB: give every stream row the checksum of what it holds now
# (src/meta_sqlite.c, ROW CHECKSUM), so that a row changed with sqlite3 is
# wrong but whole, as a bug would leave it, not damaged on disk (F20).
reseal () {
	python3 - "$1" <<-\EOF
	import sqlite3, struct, sys
	def crc32c(data):
	    crc = 0xFFFFFFFF
	    for b in data:
	        crc ^= b
	        for _ in range(8):
	            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
	    return crc ^ 0xFFFFFFFF
	db = sqlite3.connect(sys.argv[1])
	for row in db.execute("SELECT id, ino, head, version, start, epoch,"
	                      " last_lsn, profile, unlinked FROM streams").fetchall():
	    crc = crc32c(b"".join(struct.pack("<q", v) for v in row))
	    db.execute("UPDATE streams SET crc = ? WHERE id = ?", (crc, row[0]))
	db.commit()
	EOF
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
		"is not in the WAL: committed bytes [0, 8000) cannot be reached" &&
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

test_expect_success 'a stream row that fails its checksum: F20 alone' '
	damaged crc &&
	sqlite3 "$D/meta.db" "UPDATE streams SET epoch = epoch + 1 WHERE id = 2" &&
	fsck_expect 1 "$D" --repair -- \
		"F20 stream 2 (/k/b): its row in meta.db fails its checksum" \
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

test_done
