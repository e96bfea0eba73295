#!/bin/sh
test_description='the object WAL on the embedded object store: profile, ack boundary, remount, kill -9, crash points, reclaim'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/dirstore.sh"

. "$nrs_lib/objwal.sh"

test_expect_success 'nereusfs-fsck: a damaged WAL object is F4, the range it held F9' '
	nrs_mount -o "$HOLD" &&
	mkdir "$MNT/d" &&
	setfattr -n user.nereus.profile -v object-wal "$MNT/d" &&
	printf "first." >>"$MNT/d/s" &&
	printf "second" >>"$MNT/d/s" &&
	key=$(nrs_xattr "$MNT/d/s" user.nereus.index | sed -n "2s/.* walobj:\([^:]*\):.*/\1/p") &&
	test -n "$key" &&
	nrs_umount &&
	f=$(obj_file "$key") &&
	printf X | dd of="$f" bs=1 seek=300 conv=notrunc status=none &&
	fsck_expect 1 "$DATA" -- "F4 $key: the WAL object" "F9" &&
	nrs_mount -o "$HOLD" &&
	test "$(nrs_xattr "$MNT/d/s" user.nereus.head)" = 12 &&
	test_must_fail cat "$MNT/d/s" >/dev/null 2>&1 &&
	nrs_umount
'
test_expect_success 'objects=DIR: the embedded store, WAL objects too, in a directory of its own' '
	mkdir -m 700 "$TRASH/elsewhere" &&
	nrs_mount -o "$HOLD,objects=$TRASH/elsewhere" &&
	rm "$MNT/d/s" &&
	mkdir "$MNT/w" &&
	setfattr -n user.nereus.profile -v object-wal "$MNT/w" &&
	printf "abc" >>"$MNT/w/s" &&
	printf "def" >>"$MNT/w/s" &&
	test -n "$(find "$TRASH/elsewhere/owal" -type f)" &&
	nrs_kill9 &&
	nrs_mount -o "$HOLD,objects=$TRASH/elsewhere" &&
	test "$(cat "$MNT/w/s")" = abcdef &&
	nrs_umount &&
	fsck_expect 0 "$DATA" --objects="$TRASH/elsewhere" --no-objects --
'
test_done
