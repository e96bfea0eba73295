#!/bin/sh
test_description='a small file system: the default wal_reserve scales down (wal_local_append.c WA5), and the mount says so in its log and /.nereus/status'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# The data directory lives on a 32 MiB tmpfs at $SMALL (smallfs.sh):
# below the 64 MiB the reserve used to be, so every append failed ENOSPC
# and nothing said why.
. "$nrs_lib/smallfs.sh"
S=$MNT/s

# space KEY: a field of the "space" object of /.nereus/status.
space () {
	python3 -c "import json,sys; v = json.load(open(sys.argv[1]))[\"space\"][sys.argv[2]]; print(json.dumps(v))" \
		"$MNT/.nereus/status" "$1"
}

# Materialization held off: this is about the WAL's reserve.
HOLD="materialize_bytes=1073741824,materialize_age_ms=3600000"

test_expect_success 'a 32 MiB tmpfs holds the data directory' '
	smallfs_mount 32m nrs-smallfs
'

test_expect_success 'default reserve: scaled to 4 MiB, said at mount, appends work' '
	nrs_mount -o "$HOLD" &&
	grep -q "warning: the file system of $DATA is small (33554432 bytes): wal_reserve scaled down from 67108864 to 4194304" "$LOG" &&
	test "$(space wal_reserve)" = 4194304 &&
	test "$(space reserve_scaled)" = true &&
	test "$(space warning)" = "\"reserve_scaled\"" &&
	test "$(space below_reserve)" = false &&
	test "$(space fs_bytes)" = 33554432 &&
	nrs-appender -t 2 -n 100 -s 33-65536 -w 100 -a "$TRASH/ack" "$S" &&
	test "$(stat -c %s "$S")" -gt 100000 &&
	nrs_verify_records -c -a "$TRASH/ack" "$S"
'

test_expect_success 'a reserve no smaller than the file system: every append fails, and the mount says so' '
	nrs_remount -o "$HOLD,wal_reserve=33554432" &&
	grep -q "warning: the file system of $DATA holds 33554432 bytes, no more than wal_reserve (33554432): every append will fail ENOSPC" "$LOG" &&
	test "$(space warning)" = "\"fs_smaller_than_reserve\"" &&
	test "$(space reserve_scaled)" = false &&
	test "$(space below_reserve)" = true &&
	expect_errno ENOSPC writen "$S" 100
'

test_expect_success 'less free than the reserve: said at mount, and live in the status' '
	nrs_umount &&
	avail=$(smallfs_avail) &&
	dd if=/dev/zero of="$SMALL/filler" bs=1M \
		count=$(( (avail - 6 * 1048576) / 1048576 )) status=none &&
	nrs_mount -o "$HOLD,wal_reserve=8388608" &&
	grep -q "bytes free, no more than wal_reserve (8388608): appends fail ENOSPC until space is freed" "$LOG" &&
	test "$(space warning)" = "\"free_below_reserve\"" &&
	test "$(space below_reserve)" = true &&
	expect_errno ENOSPC writen "$S" 100 &&
	rm "$SMALL/filler" &&
	test "$(space below_reserve)" = false &&
	nrs_verify_records -c -a "$TRASH/ack" "$S" &&
	printf more >>"$S" &&
	test "$(tail -c 4 "$S")" = more
'

test_expect_success 'unmount, and the tmpfs' '
	nrs_umount &&
	umount "$SMALL" &&
	! small_is_mounted
'

test_done
