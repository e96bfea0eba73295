#!/bin/sh
test_description='a lowered stream id sequence never gives a new stream an old id (recovery.c RD4)'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# A stream is removed while its record is still in the WAL (nothing is
# materialized), then sqlite_sequence is set back below its id, as damage
# could leave it.  A stream created next must not take the old id: with
# it, the next start would re-publish the old stream's first record onto
# the new, empty stream (base 0, no predecessor: it continues it exactly).

nomat=materialize_bytes=1000000000000,materialize_age_ms=100000000

test_expect_success 'two streams, the second removed, its record still in the WAL' '
	nrs_mount -o $nomat &&
	printf aaaa >"$MNT/a" &&
	printf bbbbbbbb >"$MNT/b" &&
	test "$(nrs_xattr "$MNT/a" user.nereus.id)" = 1 &&
	test "$(nrs_xattr "$MNT/b" user.nereus.id)" = 2 &&
	rm "$MNT/b" &&
	nrs_umount &&
	grep -q bbbbbbbb "$DATA"/wal/*.seg
'

test_expect_success 'damage: the streams sequence set back to 1' '
	sqlite3 "$DATA/meta.db" "UPDATE sqlite_sequence SET seq = 1 WHERE name = '"'"'streams'"'"'" &&
	test "$(sqlite3 "$DATA/meta.db" "SELECT seq FROM sqlite_sequence WHERE name = '"'"'streams'"'"'")" = 1
'

test_expect_success 'a new stream gets an id the WAL does not name' '
	nrs_mount -o $nomat &&
	: >"$MNT/c" &&
	id=$(nrs_xattr "$MNT/c" user.nereus.id) &&
	echo "# new stream id $id" &&
	test "$id" -gt 2 &&
	nrs_umount
'

test_expect_success 'remount: the new stream is still empty, the old bytes nowhere' '
	nrs_mount -o $nomat &&
	test "$(stat -c %s "$MNT/c")" = 0 &&
	test "$(cat "$MNT/a")" = aaaa &&
	test ! -e "$MNT/b" &&
	nrs_umount
'

test_done
