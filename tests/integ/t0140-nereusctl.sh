#!/bin/sh
test_description='nereusctl end to end: stat, fence, trim, append, tail, status'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

PATH=${NRS_TOOLS:-$nrs_top}:$PATH
S=$MNT/ns/s

# Run nereusctl, keep its exit status in rc and stderr in $TRASH/err.
ctl () {
	nereusctl "$@" 2>"$TRASH/err"
	rc=$?
}

test_expect_success 'mount' '
	nrs_mount &&
	mkdir "$MNT/ns" &&
	: >"$S"
'

test_expect_success 'append: stdin as one append; stat, human and JSON' '
	printf hello | nereusctl append "$S" &&
	printf " world" | nereusctl append "$S" --expect 5 &&
	nereusctl stat "$S" >"$TRASH/out" &&
	printf "head 11\nversion 2\nstart 0\nepoch 0\n" >"$TRASH/want" &&
	test_cmp "$TRASH/want" "$TRASH/out" &&
	nereusctl stat "$S" --json >"$TRASH/json" &&
	python3 -c "import json,sys; d = json.load(open(sys.argv[1])); assert (d[\"head\"], d[\"version\"], d[\"start\"], d[\"epoch\"], d[\"path\"]) == (11, 2, 0, 0, sys.argv[2]), d" \
		"$TRASH/json" "$S" &&
	test "$(cat "$S")" = "hello world"
'

test_expect_success 'append --expect at the wrong offset: exit 4, ESPIPE, nothing written' '
	printf X >"$TRASH/x" &&
	ctl append "$S" --expect 3 <"$TRASH/x" ;
	test "$rc" = 4 &&
	grep -q ESPIPE "$TRASH/err" &&
	test "$(stat -c %s "$S")" = 11
'

test_expect_success 'append: 1 MiB is one append; more is refused whole' '
	head -c 1048576 /dev/urandom >"$TRASH/mib" &&
	nereusctl append "$S" <"$TRASH/mib" &&
	test "$(nrs_xattr "$S" user.nereus.version)" = 3 &&
	head -c 1048577 /dev/zero >"$TRASH/toobig" &&
	ctl append "$S" <"$TRASH/toobig" ;
	test "$rc" = 1 &&
	grep -q EFBIG "$TRASH/err" &&
	test "$(stat -c %s "$S")" = $((11 + 1048576)) &&
	tail -c 1048576 "$S" | cmp - "$TRASH/mib" &&
	nereusctl append "$S" </dev/null &&
	test "$(nrs_xattr "$S" user.nereus.version)" = 3
'

test_expect_success 'fence: raise, same again; lower exits 3 with ESTALE' '
	nereusctl fence "$S" 4 &&
	nereusctl fence "$S" 4 &&
	test "$(nrs_xattr "$S" user.nereus.epoch)" = 4 &&
	ctl fence "$S" 3 ;
	test "$rc" = 3 &&
	grep -q ESTALE "$TRASH/err"
'

test_expect_success 'trim, then stat and tail start at the new start' '
	nereusctl trim "$S" 6 &&
	nereusctl stat "$S" | grep -x "start 6" &&
	nereusctl tail "$S" | head -c 5 >"$TRASH/out" &&
	test "$(cat "$TRASH/out")" = world &&
	ctl trim "$S" 3 ;
	test "$rc" = 1 &&
	grep -q EINVAL "$TRASH/err"
'

test_expect_success 'tail -f follows appends' '
	: >"$MNT/ns/t" &&
	nrs_bg sh -c "exec nereusctl tail -f \"\$1\" >\"\$2\"" sh "$MNT/ns/t" "$TRASH/followed" &&
	tailer=$NRS_LAST_BG &&
	for i in 1 2 3 4 5; do
		printf "line %s\n" $i | nereusctl append "$MNT/ns/t" || return 1
		sleep 0.2
	done &&
	n=0 &&
	while [ "$(wc -l <"$TRASH/followed")" -lt 5 ] && [ $n -lt 50 ]; do
		sleep 0.1; n=$((n + 1))
	done &&
	kill $tailer && { wait $tailer || true; } &&
	cmp "$MNT/ns/t" "$TRASH/followed"
'

test_expect_success 'status prints the JSON of /.nereus/status' '
	nereusctl status "$MNT" >"$TRASH/status" &&
	cmp "$TRASH/status" "$MNT/.nereus/status" ||
	python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$TRASH/status"
'

test_expect_success 'errors: usage exits 2, a missing stream or a directory exits 1 with the errno' '
	ctl ; test "$rc" = 2 &&
	ctl stat ; test "$rc" = 2 &&
	ctl fence "$S" x1 ; test "$rc" = 2 &&
	ctl frobnicate "$S" ; test "$rc" = 2 &&
	ctl stat "$MNT/ns/nope" ; test "$rc" = 1 &&
	grep -q ENOENT "$TRASH/err" &&
	ctl stat "$MNT/ns" ; test "$rc" = 1 &&
	grep -q ENOTTY "$TRASH/err" &&
	ctl fence "$MNT/.nereus/status" 1 ; test "$rc" = 1 &&
	grep -q EACCES "$TRASH/err"
'

test_expect_success 'unmount' '
	nrs_umount
'

test_done
