#!/bin/sh
test_description='a retention or grace period too long to count means forever, never now (sat.h SAT1); retention -1 is Kafka'\''s forever, kept as 0 (issue 12 item 2)'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/objlib.sh"

max=9223372036854775807		# Java's Long.MAX_VALUE
umax=18446744073709551615	# 2^64 - 1
# the largest gc_grace_ms the daemon takes (UINT64_MAX / 1000000)
grace=18446744073709
OPTS="$FAST,gc_grace_ms=$grace"

xattr_is () { # FILE NAME VALUE
	[ "$(nrs_xattr "$1" "$2")" = "$3" ]
}
# several retention passes (one a second), and GC ones (two a second)
passes () {
	sleep 3.2
}

test_expect_success 'mount; a stream of several objects' '
	nrs_mount -o "$OPTS" &&
	mkdir "$MNT/k" &&
	head -c 1200000 /dev/urandom >"$TRASH/blob" &&
	dd if="$TRASH/blob" of="$MNT/k/s" bs=65536 oflag=append conv=notrunc status=none &&
	nrs_wait_for 20 nrs_materialized "$MNT/k/s" &&
	test "$(nrs_xattr "$MNT/k/s" user.nereus.index | wc -l)" -ge 4
'

test_expect_success 'retention.ms 2^63 - 1 on the stream keeps every byte' '
	setfattr -n user.nereus.retention.ms -v $max "$MNT/k/s" &&
	xattr_is "$MNT/k/s" user.nereus.retention.ms $max &&
	passes &&
	xattr_is "$MNT/k/s" user.nereus.start 0 &&
	cmp "$MNT/k/s" "$TRASH/blob" &&
	test "$(nrs_metric retention_trims_total)" = 0
'

test_expect_success 'retention.ms 2^64 - 1 and 2^63 ns + 1 ms on the directory keep every byte' '
	setfattr -n user.nereus.retention.ms -v $umax "$MNT/k" &&
	head -c 700000 /dev/urandom >"$TRASH/blob2" &&
	dd if="$TRASH/blob2" of="$MNT/k/t" bs=65536 oflag=append conv=notrunc status=none &&
	nrs_wait_for 20 nrs_materialized "$MNT/k/t" &&
	xattr_is "$MNT/k/t" user.nereus.retention.ms $umax &&
	passes &&
	setfattr -n user.nereus.retention.ms -v 9223372036855 "$MNT/k" &&
	passes &&
	xattr_is "$MNT/k/t" user.nereus.start 0 &&
	cmp "$MNT/k/t" "$TRASH/blob2" &&
	test "$(nrs_metric retention_trims_total)" = 0
'

test_expect_success 'retention -1 (Kafka) is accepted as 0, keep forever, and reads back 0' '
	setfattr -n user.nereus.retention.ms -v -1 "$MNT/k/s" &&
	xattr_is "$MNT/k/s" user.nereus.retention.ms 0 &&
	setfattr -n user.nereus.retention.bytes -v -1 "$MNT/k/s" &&
	xattr_is "$MNT/k/s" user.nereus.retention.bytes 0 &&
	setfattr -n user.nereus.retention.bytes -v -1 "$MNT/k" &&
	xattr_is "$MNT/k" user.nereus.retention.bytes 0 &&
	passes &&
	xattr_is "$MNT/k/s" user.nereus.start 0
'

test_expect_success 'other negatives and non-numbers are EINVAL and change nothing' '
	setfattr -n user.nereus.retention.ms -v 5000000 "$MNT/k/s" &&
	for v in -2 -0 -10 --1 " -1" "-1 " -1x -9223372036854775808 ""; do
		expect_errno EINVAL setxattr "$MNT/k/s" user.nereus.retention.ms "$v" &&
		expect_errno EINVAL setxattr "$MNT/k/s" user.nereus.retention.bytes "$v" ||
		return 1
	done &&
	xattr_is "$MNT/k/s" user.nereus.retention.ms 5000000 &&
	xattr_is "$MNT/k/s" user.nereus.retention.bytes 0 &&
	expect_errno EINVAL setxattr "$MNT/k/s" user.nereus.trim -1 &&
	expect_errno EINVAL setxattr "$MNT/k/s" user.nereus.epoch -1
'

test_expect_success 'gc_grace_ms at its largest: a trimmed object is never deleted' '
	del0=$(nrs_metric gc_deleted_objects_total) &&
	mkdir "$MNT/g" &&
	head -c 800000 /dev/urandom >"$TRASH/blob3" &&
	dd if="$TRASH/blob3" of="$MNT/g/u" bs=65536 oflag=append conv=notrunc status=none &&
	nrs_wait_for 20 nrs_materialized "$MNT/g/u" &&
	cut=$(nrs_xattr "$MNT/g/u" user.nereus.index | sed -n 2p | cut -d" " -f1) &&
	test "$cut" -gt 0 &&
	setfattr -n user.nereus.trim -v "$cut" "$MNT/g/u" &&
	xattr_is "$MNT/g/u" user.nereus.start "$cut" &&
	passes &&
	test "$(nrs_metric gc_deleted_objects_total)" = "$del0" &&
	test "$(nrs_metric gc_draining_bytes)" -gt 0
'

test_expect_success 'clean unmount' '
	nrs_umount
'
test_done
