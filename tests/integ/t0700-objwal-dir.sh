#!/bin/sh
test_description='the object WAL on the embedded object store: profile, ack boundary, remount, kill -9, crash points, reclaim'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/dirstore.sh"

. "$nrs_lib/objwal.sh"

test_expect_success 'objects=DIR: the embedded store, WAL objects too, in a directory of its own' '
	mkdir -m 700 "$TRASH/elsewhere" &&
	nrs_mount -o "$HOLD,objects=$TRASH/elsewhere" &&
	mkdir "$MNT/w" &&
	setfattr -n user.nereus.profile -v object-wal "$MNT/w" &&
	printf "abc" >>"$MNT/w/s" &&
	printf "def" >>"$MNT/w/s" &&
	test -n "$(find "$TRASH/elsewhere/owal" -type f)" &&
	nrs_kill9 &&
	nrs_mount -o "$HOLD,objects=$TRASH/elsewhere" &&
	test "$(cat "$MNT/w/s")" = abcdef &&
	nrs_umount
'
test_done
