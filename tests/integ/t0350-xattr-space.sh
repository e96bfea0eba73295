#!/bin/sh
test_description='metadata growth stops before the WAL reserve: a user filling the disk through xattrs leaves appends room, and removals work on the full disk, also after a remount'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# src/meta/sqlite.c MS1: a new name or a growing user.* xattr fails ENOSPC while
# less than twice wal_reserve would stay free; appends go on down to
# wal_reserve (wal_local_append.c WA5); unlink, rmdir, removexattr and trim are
# never refused for space.  The data directory lives on a 32 MiB tmpfs
# (smallfs.sh).
. "$nrs_lib/smallfs.sh"
RESERVE=4194304
OPTS="wal_reserve=$RESERVE,materialize_bytes=1073741824,materialize_age_ms=3600000"

test_expect_success 'a 32 MiB tmpfs holds the data directory' '
	smallfs_mount 32m nrs-xattr-space &&
	nrs_mount -o "$OPTS" &&
	mkdir "$MNT/x" "$MNT/empty" "$MNT/empty2" &&
	printf 0123456789 >>"$MNT/s" &&
	: >>"$MNT/x/room"
'

# fill_xattrs: new files with three 64 KiB values each until ENOSPC; the
# next file number is left in $i.
i=0
fill_xattrs () {
	full= && limit=$((i + 400)) &&
	while [ $i -lt $limit ] && [ -z "$full" ]; do
		i=$((i + 1)) &&
		if ! touch "$MNT/x/f$i" 2>"$TRASH/err"; then
			grep -q "No space left" "$TRASH/err" && full=create && break
			cat "$TRASH/err"; return 1
		fi &&
		nrs-syscalls setxattrn "$MNT/x/f$i" user.v0 65536 -- \
			setxattrn "$MNT/x/f$i" user.v1 65536 -- \
			setxattrn "$MNT/x/f$i" user.v2 65536 >"$TRASH/out" &&
		if grep -v -x ok "$TRASH/out" >"$TRASH/bad"; then
			grep -q -x ENOSPC "$TRASH/bad" || { cat "$TRASH/bad"; return 1; }
			full=setxattr
		fi
	done &&
	df -k "$SMALL" &&
	echo "refused ($full) at file $i with $(smallfs_avail) bytes free" &&
	test -n "$full" &&
	test "$(smallfs_avail)" -gt $((RESERVE + 524288)) &&
	expect_errno ENOSPC setxattrn "$MNT/x/room" user.new 65536 &&
	k=0 &&
	while [ $k -lt 2000 ] && mkdir "$MNT/x/d$i.$k" 2>/dev/null; do
		k=$((k + 1))
	done &&
	echo "then $k directories, $(smallfs_avail) bytes free" &&
	test "$(smallfs_avail)" -gt $((RESERVE + 524288)) &&
	expect_errno ENOSPC mkdir "$MNT/x/newdir" &&
	! touch "$MNT/x/newfile" 2>/dev/null &&
	! test -e "$MNT/x/newfile"
}

# fill_appends MIN: 64 KiB appends until ENOSPC, at least MIN of them.
fill_appends () {
	n=0 && h0=$(stat -c %s "$MNT/s") &&
	while [ $n -lt 400 ]; do
		r=$(nrs-syscalls writen "$MNT/s" 65536) &&
		test "$r" = "ok 65536" || break
		n=$((n + 1))
	done &&
	echo "$n appends of 64 KiB, then: $r; $(smallfs_avail) bytes free" &&
	test "$r" = ENOSPC &&
	test $n -ge "$1" &&
	test "$(stat -c %s "$MNT/s")" = $((h0 + n * 65536)) &&
	test "$(nrs_xattr "$MNT/s" user.nereus.head)" = $((h0 + n * 65536))
}

pipeline_failed () {
	grep -q "^nereus_pipeline_failed 1\$" "$MNT/.nereus/metrics"
}

# Everything that frees space must work on the full disk.
removals () {
	h=$(nrs_xattr "$MNT/s" user.nereus.head) &&
	setfattr -x user.v0 "$MNT/x/f$1" &&
	expect_errno ENODATA getxattr "$MNT/x/f$1" user.v0 &&
	expect_errno ok removexattr "$MNT/x/f$1" user.v1 &&
	rm "$MNT/x/f$2" &&
	! test -e "$MNT/x/f$2" &&
	rmdir "$3" &&
	! test -e "$3" &&
	setfattr -n user.nereus.trim -v $((h - 100)) "$MNT/s" &&
	test "$(nrs_xattr "$MNT/s" user.nereus.start)" = $((h - 100)) &&
	test "$(tail -c 100 "$MNT/s" | wc -c)" = 100 &&
	expect_errno ok setxattrn "$MNT/x/f$1" user.v2 10 &&
	! pipeline_failed
}

test_expect_success 'fill with 64 KiB xattrs: ENOSPC while more than the WAL reserve is free' '
	fill_xattrs
'

test_expect_success 'appends still work, down to the WAL reserve' '
	fill_appends 4
'

test_expect_success 'the disk is full: rm, setfattr -x, rmdir, trim and a shrinking set work' '
	removals 1 2 "$MNT/empty"
'

test_expect_success 'a remount on the full disk, filled again: removals work' '
	fill_appends 0 &&
	nrs_remount -o "$OPTS" &&
	df -k "$SMALL" &&
	fill_xattrs &&
	fill_appends 0 &&
	removals 3 4 "$MNT/empty2"
'

test_expect_success 'unmount, and the tmpfs' '
	nrs_umount &&
	umount "$SMALL" &&
	! small_is_mounted
'

test_done
