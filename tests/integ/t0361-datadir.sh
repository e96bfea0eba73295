#!/bin/sh
test_description='state files 0600 and directories 0700 whatever the umask (fileio.h DM1); a data directory others can read or write is refused (DM2)'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/objlib.sh"

# modes_ok DIR: every file under DIR (DIR included) is 0600 and every
# directory 0700; prints the ones that are not.
modes_ok () {
	find "$1" \( -type f ! -perm 0600 \) -printf "file %m %p\n" \
		-o \( -type d ! -perm 0700 \) -printf "dir %m %p\n" >"$TRASH/bad" &&
	cat "$TRASH/bad" &&
	test ! -s "$TRASH/bad"
}

# fill: streams, xattrs, objects and a disk cache, so every kind of state
# file exists; then unmount.
fill () {
	mkdir "$MNT/k" &&
	head -c 600000 /dev/urandom >"$TRASH/blob" &&
	dd if="$TRASH/blob" of="$MNT/k/s" bs=65536 oflag=append conv=notrunc status=none &&
	setfattr -n user.checkpoint -v 42 "$MNT/k/s" &&
	wait_materialized "$MNT/k/s" &&
	cmp "$TRASH/blob" "$MNT/k/s" &&
	test -f "$DATA/meta.db-wal" &&
	test -n "$(find "$DATA/objects" -type f)" &&
	test -n "$(find "$DATA/wal" -type f)" &&
	test -n "$(find "$CACHE" -name "*.blk")" &&
	modes_ok "$DATA" &&
	modes_ok "$CACHE" &&
	nrs_umount
}

test_expect_success 'umask 000, a data directory the daemon creates' '
	rmdir "$DATA" &&
	CACHE=$TRASH/cache0 &&
	umask 000 &&
	nrs_mount -o "$FAST,disk_cache=$CACHE" &&
	umask 022 &&
	fill &&
	modes_ok "$DATA" &&
	modes_ok "$CACHE"
'

test_expect_success 'umask 022, a data directory that exists (0700), remounted' '
	rm -rf "$DATA" "$CACHE" &&
	mkdir -m 700 "$DATA" &&
	CACHE=$TRASH/cache1 &&
	nrs_mount -o "$FAST,disk_cache=$CACHE" &&
	fill &&
	nrs_mount -o "$FAST,disk_cache=$CACHE" &&
	printf more >>"$MNT/k/s" &&
	nrs_umount &&
	modes_ok "$DATA" &&
	modes_ok "$CACHE"
'

test_expect_success 'an older meta.db left 0644 is made 0600' '
	chmod 0644 "$DATA/meta.db" &&
	nrs_mount &&
	nrs_umount &&
	modes_ok "$DATA"
'

# refused MODE: the daemon will not start on a data directory of MODE,
# and says which mode and what to do.
refused () {
	chmod "$1" "$DATA" &&
	test_must_fail timeout 10 "$NEREUSFS" -f -o "data=$DATA" "$MNT" 2>"$TRASH/err" &&
	cat "$TRASH/err" &&
	! nrs_is_mounted &&
	grep -q "data directory $DATA has mode $2: other users could read or change the daemon.s state; refusing it (run: chmod 700 $DATA)" "$TRASH/err"
}

test_expect_success 'a data directory others can read, write or enter is refused' '
	refused 0755 0755 &&
	refused 0777 0777 &&
	refused 0750 0750 &&
	refused 0701 0701 &&
	refused 0710 0710 &&
	refused 1777 1777
'

test_expect_success 'a disk cache directory others can read is refused too' '
	chmod 0700 "$DATA" &&
	chmod 0755 "$CACHE" &&
	test_must_fail timeout 10 "$NEREUSFS" -f -o "data=$DATA,disk_cache=$CACHE" "$MNT" \
		2>"$TRASH/err" &&
	cat "$TRASH/err" &&
	! nrs_is_mounted &&
	grep -q "disk cache directory $CACHE has mode 0755.*chmod 700 $CACHE" "$TRASH/err"
'

test_expect_success 'a data directory owned by another user is refused' '
	chmod 0700 "$CACHE" &&
	chown nobody "$DATA" &&
	test_must_fail timeout 10 "$NEREUSFS" -f -o "data=$DATA" "$MNT" 2>"$TRASH/err" &&
	cat "$TRASH/err" &&
	grep -q "data directory $DATA is owned by uid $(id -u nobody), not by this daemon.s ($(id -u)) or root" "$TRASH/err" &&
	chown "$(id -u)" "$DATA" &&
	nrs_mount &&
	head -c 600000 "$MNT/k/s" | cmp - "$TRASH/blob"
'

test_expect_success 'unmount' '
	nrs_umount
'

test_done
