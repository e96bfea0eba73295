#!/bin/sh
test_description='the embedded store on the WAL file system or another one: /.nereus/status says which (core_obj.c CO1)'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# same_fs_as_wal of /.nereus/status, as "true" or "false"
same_fs () {
	python3 -c 'import json,sys; print(str(json.load(sys.stdin)["objects"]["same_fs_as_wal"]).lower())' \
		<"$MNT/.nereus/status"
}

test_expect_success 'a fresh data directory: DATA/objects shares the WAL file system' '
	nrs_mount &&
	test "$(same_fs)" = true &&
	grep "share the WAL.s file system" "$LOG" >/dev/null &&
	nrs_umount
'

test_expect_success 'remounted: still the same file system' '
	nrs_mount &&
	test "$(same_fs)" = true &&
	nrs_umount
'

test_expect_success '-o objects=DIR on another file system: not the same' '
	other=$(nrs_other_fs) &&
	nrs_mount -o "objects=$other" &&
	test "$(same_fs)" = false &&
	nrs_umount
'

test_expect_success '-o objects=DIR on the same file system: the same' '
	mkdir -m 700 "$TRASH/objs" &&
	nrs_mount -o "objects=$TRASH/objs" &&
	test "$(same_fs)" = true &&
	nrs_umount
'

test_done
