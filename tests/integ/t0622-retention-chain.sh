#!/bin/sh
test_description='inherited retention costs nothing per pass when nothing changed, however deep the streams (sqlite_settings.c MT8; issue 12 item 4)'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/objlib.sh"

DEPTH=1000
deep=$(i=0; while [ $i -lt $DEPTH ]; do printf "d/"; i=$((i + 1)); done)
deep=${deep%/}

steps () {
	nrs_metric lifecycle_chain_steps_total
}
started_past () { # FILE N
	[ "$(nrs_xattr "$1" user.nereus.start)" -gt "$2" ]
}
steps_past () { # N
	[ "$(steps)" -gt "$1" ]
}

test_expect_success "mount; 8 streams $DEPTH directories deep, retention on the top one" '
	nrs_mount -o "$FAST" &&
	mkdir -p "$MNT/top/$deep" &&
	for i in 1 2 3 4 5 6 7 8; do
		printf "%s" "$i" >>"$MNT/top/$deep/s$i" || return 1
	done &&
	setfattr -n user.nereus.retention.ms -v 86400000 "$MNT/top" &&
	test "$(nrs_xattr "$MNT/top/$deep/s1" user.nereus.retention.ms)" = 86400000
'

test_expect_success 'passes with nothing changed read no inode: the count stays flat' '
	sleep 2.2 &&	# the first passes after the change walk the chain once
	s0=$(steps) &&
	echo "# $s0 inodes read so far" &&
	test "$s0" -gt "$DEPTH" &&
	test "$s0" -lt $((3 * DEPTH)) &&
	sleep 3.2 &&	# three more retention passes
	test "$(steps)" = "$s0"
'

test_expect_success 'a change on the top directory is seen below, for about one walk of the chain' '
	head -c 1000000 /dev/urandom >"$TRASH/blob" &&
	dd if="$TRASH/blob" of="$MNT/top/$deep/s1" bs=65536 oflag=append conv=notrunc status=none &&
	nrs_wait_for 20 nrs_materialized "$MNT/top/$deep/s1" &&
	s0=$(steps) &&
	setfattr -n user.nereus.retention.bytes -v 300000 "$MNT/top" &&
	nrs_wait_for 10 started_past "$MNT/top/$deep/s1" 0 &&
	sleep 2.2 &&
	s1=$(steps) &&
	echo "# $((s1 - s0)) inodes read after the change" &&
	test $((s1 - s0)) -ge "$DEPTH" &&
	test $((s1 - s0)) -lt $((3 * DEPTH)) &&
	sleep 2.2 &&
	test "$(steps)" = "$s1"
'

test_expect_success 'a stream renamed out of the tree leaves its policy behind; one renamed in takes it' '
	mv "$MNT/top/$deep/s2" "$MNT/s2" &&
	test "$(nrs_xattr "$MNT/s2" user.nereus.retention.ms)" = 0 &&
	printf x >>"$MNT/t" &&
	mv "$MNT/t" "$MNT/top/$deep/t" &&
	test "$(nrs_xattr "$MNT/top/$deep/t" user.nereus.retention.bytes)" = 300000 &&
	mv "$MNT/top/$deep" "$MNT/low" &&
	test "$(nrs_xattr "$MNT/low/t" user.nereus.retention.bytes)" = 0 &&
	mv "$MNT/low" "$MNT/top/$deep"
'

test_expect_success 'clean unmount' '
	nrs_umount
'
test_done
