#!/bin/sh
test_description='epochs survive kill -9 and remount; a fenced leader stays fenced'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

PATH=${NRS_TOOLS:-$nrs_top}:$PATH
S=$MNT/s

test_expect_success 'mount, fence to 7 with the ioctl, append' '
	nrs_mount &&
	printf abc >"$S" &&
	nereusctl fence "$S" 7 &&
	printf def | nereusctl append "$S" --expect 3
'

test_expect_success 'kill -9 right after the fence returned; remount: epoch 9' '
	nereusctl fence "$S" 9 &&
	nrs_kill9 &&
	nrs_mount &&
	test "$(nrs_xattr "$S" user.nereus.epoch)" = 9 &&
	test "$(cat "$S")" = abcdef &&
	nereusctl stat "$S" >"$TRASH/stat" &&
	grep -x "epoch 9" "$TRASH/stat"
'

test_expect_success 'a lower epoch is still refused after the crash' '
	{ nereusctl fence "$S" 8; rc=$?; } &&
	test "$rc" = 3 &&
	nereusctl fence "$S" 9
'

test_expect_success 'fence under load, kill -9, remount: epoch kept, acks kept' '
	nrs_bg nrs-appender -t 2 -d 30 -s 33-4096 -S 7 -a "$TRASH/ack" "$MNT/load" \
		>"$TRASH/appender.out" 2>&1 &&
	app=$NRS_LAST_BG &&
	sleep 0.3 &&
	nereusctl fence "$MNT/load" 12 &&
	{ nrs_wait $app 30; arc=$?; } ;
	cat "$TRASH/appender.out" &&
	# 3: the appender writers, opened under epoch 0, were fenced
	test "$arc" = 3 &&
	grep -q ESTALE "$TRASH/appender.out" &&
	nrs_kill9 &&
	nrs_mount &&
	test "$(nrs_xattr "$MNT/load" user.nereus.epoch)" = 12 &&
	nrs-verify -a "$TRASH/ack" "$MNT/load"
'

test_expect_success 'clean remount: epochs kept' '
	nrs_remount &&
	test "$(nrs_xattr "$S" user.nereus.epoch)" = 9 &&
	test "$(nrs_xattr "$MNT/load" user.nereus.epoch)" = 12
'

test_expect_success 'unmount' '
	nrs_umount
'

test_done
