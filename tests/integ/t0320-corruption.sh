#!/bin/sh
test_description='a flipped byte in a WAL record: EIO on that range, never wrong bytes; everything else keeps working'
. "${NRS_TESTLIB:-$(dirname "$0")/lib.sh}"

# I6: every byte read from the WAL is checked against its CRC32C.  The
# damage is made offline, after a clean unmount, in the payload of the
# second of three 4 KiB appends to stream a; stream b's records follow it
# in the same segment, so recovery sees a corrupt record followed by valid
# ones (corruption, not a torn tail: nothing is cut).

A=$MNT/k/a
B=$MNT/k/b

# offset of byte N of the payload of the record that holds logical offset
# START, from user.nereus.index ("start end gen wal:SEG:OFF" per line);
# a record has a 64-byte header and 4 bytes of CRC per 64 KiB chunk.
payload_byte () { # FILE START N -> "SEGFILE OFFSET"
	nrs_xattr "$1" user.nereus.index | awk -v s="$2" -v n="$3" -v d="$DATA" '
		$1 == s {
			split($4, t, ":")
			len = $2 - $1
			chunks = int((len + 65535) / 65536)
			printf "%s/wal/%016x.seg %d\n", d, t[2], t[3] + 64 + 4 * chunks + n
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

test_done
