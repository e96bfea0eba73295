#!/bin/sh
test_description='a flipped byte in a WAL record or in a stream row of meta.db: EIO, never wrong bytes; everything else keeps working'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# I6: every byte read from the WAL is checked against its CRC32C.  The
# damage is made offline, after a clean unmount, in the payload of the
# second of three 4 KiB appends to stream a; stream b's records follow it
# in the same segment, so recovery sees a corrupt record followed by valid
# ones (corruption, not a torn tail: nothing is cut).

A=$MNT/k/a
B=$MNT/k/b

# offset of byte N of the payload of the 4 KiB record that holds logical
# offset START, from user.nereus.index ("start end gen wal:SEG:OFF" per
# line; adjacent records of one segment are one line, OFF where its first
# record starts).  The appends to a are written back to back, so the
# records of its line follow one another in the segment: each is a 64-byte
# header, 4 bytes of CRC (one chunk) and 4096 bytes of payload, 4168 bytes
# in all (8-byte aligned).
payload_byte () { # FILE START N -> "SEGFILE OFFSET"
	nrs_xattr "$1" user.nereus.index | awk -v s="$2" -v n="$3" -v d="$DATA" '
		$1 <= s && s < $2 && $4 ~ /^wal:/ {
			split($4, t, ":")
			rec = int((s - $1) / 4096)
			printf "%s/wal/%016x.seg %d\n", d, t[2], t[3] + rec * 4168 + 64 + 4 + n
			found = 1
		}
		END { exit !found }'
}

test_expect_success 'three 4 KiB appends to a, two to b' '
	nrs_mount &&
	mkdir "$MNT/k" &&
	for i in 1 2 3; do
		head -c 4096 /dev/urandom >"$TRASH/a$i" &&
		cat "$TRASH/a$i" >>"$A" || return 1
	done &&
	for i in 1 2; do
		head -c 4096 /dev/urandom >"$TRASH/b$i" &&
		cat "$TRASH/b$i" >>"$B" || return 1
	done &&
	cat "$TRASH/a1" "$TRASH/a2" "$TRASH/a3" >"$TRASH/a.all" &&
	cmp "$A" "$TRASH/a.all" &&
	id_a=$(nrs_xattr "$A" user.nereus.id) &&
	set -- $(payload_byte "$A" 4096 100) &&
	seg=$1 && off=$2 &&
	echo "# flipping $seg byte $off" &&
	nrs_umount
'

test_expect_success 'flip one payload byte of the middle record of a' '
	test -f "$seg" &&
	orig=$(dd if="$seg" bs=1 skip="$off" count=1 status=none | od -An -tu1 | tr -d " ") &&
	flipped=$(( orig ^ 0x10 )) &&
	printf "$(printf "\\\\%03o" "$flipped")" |
		dd of="$seg" bs=1 seek="$off" count=1 conv=notrunc status=none &&
	test "$(dd if="$seg" bs=1 skip="$off" count=1 status=none | od -An -tu1 | tr -d " ")" = "$flipped"
'

test_expect_success 'remount: the damaged range reads EIO, never wrong bytes' '
	nrs_mount &&
	expect_errno EIO pread "$A" 4096 4096 &&
	expect_errno EIO pread "$A" 4196 1 &&
	test_must_fail cat "$A" >"$TRASH/out" 2>"$TRASH/err" &&
	grep "Input/output error" "$TRASH/err" &&
	test "$(stat -c %s "$A")" = 12288 &&
	nrs_check_head "$A"
'

test_expect_success 'the undamaged ranges of a, and all of b, read byte-exact' '
	dd if="$A" bs=4096 count=1 status=none | cmp - "$TRASH/a1" &&
	dd if="$A" bs=4096 skip=2 count=1 status=none | cmp - "$TRASH/a3" &&
	cat "$TRASH/b1" "$TRASH/b2" | cmp - "$B"
'

test_expect_success 'the log names the stream, the offset and the segment' '
	grep "stream $id_a offset 4096: WAL record at segment $(basename "$seg" .seg)" "$LOG" &&
	grep "fail their checksum" "$LOG" &&
	grep "^nereus_checksum_errors_total [1-9]" "$MNT/.nereus/metrics"
'

test_expect_success 'appends to both streams go on, and read back' '
	printf tail-a >>"$A" &&
	printf tail-b >>"$B" &&
	test "$(nrs-syscalls pread "$A" 12288 100)" = "ok 6 tail-a" &&
	test "$(tail -c 6 "$B")" = tail-b &&
	nrs_check_head "$A" "$B" &&
	nrs_umount
'

# ---- a flipped byte in meta.db ------------------------------------------
#
# SQLite has no page checksums; each streams row has a CRC32C of its own
# (src/meta/sqlite_crc.c, ROW CHECKSUM).  The damage is one flipped bit in the
# stored head of stream x, found by walking the streams table's b-tree in
# the file (the page format: sqlite.org/fileformat2.html): 12288 (0x3000)
# becomes 8192, a head that silently lost committed bytes without the
# checksum.  A data directory of its own, so fsck sees only this damage.

DATA=$TRASH/data-meta
mkdir -m 700 "$DATA" || nrs_error "cannot create $DATA"
FSCK=${NRS_FSCK:-$nrs_top/nereusfs-fsck}
X=$MNT/m/x
Y=$MNT/m/y

# flip_head DB STREAM_ID: flip bit 4 of the first (most significant) byte
# of the head column of the row of STREAM_ID in DB; says what it did.
flip_head () {
	python3 - "$1" "$2" <<-\EOF
	import struct, sys
	path, want = sys.argv[1], int(sys.argv[2])
	data = bytearray(open(path, "rb").read())
	psize = struct.unpack(">H", data[16:18])[0]
	psize = 65536 if psize == 1 else psize

	def varint(off):
	    v = 0
	    for i in range(9):
	        b = data[off + i]
	        if i == 8:
	            return (v << 8) | b, off + 9
	        v = (v << 7) | (b & 0x7F)
	        if b < 0x80:
	            return v, off + i + 1

	def size(t):
	    return {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8, 7: 8, 8: 0,
	            9: 0}.get(t, (t - 12) // 2 if t >= 12 else 0)

	def rows(page):                 # (rowid, [(type, offset)]) of a table
	    base = (page - 1) * psize
	    hdr = base + (100 if page == 1 else 0)
	    kind, ncells = data[hdr], struct.unpack(">H", data[hdr + 3:hdr + 5])[0]
	    cells = hdr + (12 if kind == 5 else 8)
	    for i in range(ncells):
	        cell = base + struct.unpack(">H", data[cells + 2 * i:cells + 2 * i + 2])[0]
	        if kind == 5:
	            yield from rows(struct.unpack(">I", data[cell:cell + 4])[0])
	            continue
	        assert kind == 13, "page %d: type %d" % (page, kind)
	        _, p = varint(cell)
	        rowid, p = varint(p)
	        hlen, q = varint(p)
	        types, end, body = [], p + hlen, p + hlen
	        while q < end:
	            t, q = varint(q)
	            types.append((t, body))
	            body += size(t)
	        yield rowid, types
	    if kind == 5:
	        yield from rows(struct.unpack(">I", data[hdr + 8:hdr + 12])[0])

	def text(t, off):
	    return bytes(data[off:off + size(t)]).decode()

	def integer(t, off):
	    return int.from_bytes(data[off:off + size(t)], "big", signed=True)

	root = [integer(*c[3]) for _, c in rows(1)
	        if text(*c[0]) == "table" and text(*c[1]) == "streams"][0]
	for rowid, cols in rows(root):
	    if rowid == want:
	        t, off = cols[2]                    # head
	        before = integer(t, off)
	        data[off] ^= 0x10
	        open(path, "r+b").write(data)
	        print("flipped byte %d of %s: head %d -> %d" %
	              (off, path, before, integer(t, off)))
	        sys.exit(0)
	sys.exit("stream %d not found" % want)
	EOF
}

test_expect_success 'meta.db: three 4 KiB appends to x, two to y' '
	nrs_mount &&
	mkdir "$MNT/m" &&
	for i in 1 2 3; do
		cat "$TRASH/a$i" >>"$X" || return 1
	done &&
	cat "$TRASH/b1" >>"$Y" &&
	cat "$TRASH/b2" >>"$Y" &&
	cmp "$X" "$TRASH/a.all" &&
	cat "$TRASH/b1" "$TRASH/b2" >"$TRASH/y.all" &&
	cmp "$Y" "$TRASH/y.all" &&
	id_x=$(nrs_xattr "$X" user.nereus.id) &&
	id_y=$(nrs_xattr "$Y" user.nereus.id) &&
	test "$(nrs_xattr "$X" user.nereus.head)" = 12288 &&
	nrs_umount &&
	test ! -s "$DATA/meta.db-wal" &&
	"$FSCK" "$DATA"
'

test_expect_success 'flip one bit of the head of x in meta.db' '
	flip_head "$DATA/meta.db" "$id_x" >"$TRASH/flip" &&
	cat "$TRASH/flip" &&
	grep "head 12288 -> 8192\$" "$TRASH/flip"
'

test_expect_success 'fsck reports the row of x, by id and path, and exits 1' '
	{ "$FSCK" "$DATA" >"$TRASH/fsck.out" 2>&1; rc=$?; } &&
	cat "$TRASH/fsck.out" &&
	test "$rc" = 1 &&
	grep "^error: F27 stream $id_x (/m/x): its row in meta.db fails its checksum" "$TRASH/fsck.out" &&
	test "$(grep -c "^error:" "$TRASH/fsck.out")" = 1
'

test_expect_success 'remount: x is offline, EIO, never its bytes; the log names stream and file' '
	nrs_mount &&
	nrs_log_since_mount | grep "stream $id_x: its row in $DATA/meta.db fails its checksum" &&
	nrs_log_since_mount | grep "recovery: stream $id_x is offline" &&
	expect_errno EIO open r "$X" rdonly &&
	test_must_fail cat "$X" >"$TRASH/out" 2>"$TRASH/err" &&
	grep "Input/output error" "$TRASH/err" &&
	test ! -s "$TRASH/out" &&
	expect_errno EIO append "$X" more &&
	test_must_fail getfattr -n user.nereus.head "$X" 2>"$TRASH/err" &&
	grep "Input/output error" "$TRASH/err" &&
	test "$(nrs_xattr "$X" user.nereus.id)" = "$id_x" &&
	test "$(stat -c %s "$X")" = 0 &&
	grep "stream $id_x: its metadata row in $DATA/meta.db fails its checksum" "$LOG" &&
	grep "^nereus_streams_damaged 1\$" "$MNT/.nereus/metrics"
'

test_expect_success 'y keeps working: reads, appends, across a remount' '
	cmp "$Y" "$TRASH/y.all" &&
	printf tail-y >>"$Y" &&
	test "$(tail -c 6 "$Y")" = tail-y &&
	nrs_check_head "$Y" &&
	ls "$MNT/m" >"$TRASH/ls" &&
	grep -x x "$TRASH/ls" &&
	nrs_remount &&
	test "$(tail -c 6 "$Y")" = tail-y &&
	expect_errno EIO pread "$X" 0 1
'

test_expect_success 'x can be removed, and then the directory is clean' '
	rm "$X" &&
	test_must_fail stat "$X" 2>/dev/null &&
	grep "^nereus_streams_damaged 0\$" "$MNT/.nereus/metrics" &&
	nrs_umount &&
	"$FSCK" "$DATA"
'

test_done
