#!/bin/sh
test_description='mount, virtual files, clean unmount, remount keeps state'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

test_expect_success 'mount an empty data directory' '
	nrs_mount &&
	test -f "$DATA/meta.db" &&
	test -d "$DATA/wal" &&
	test -d "$MNT/.nereus"
'

test_expect_success 'the mount root is an empty directory' '
	test "$(stat -c %F "$MNT")" = directory &&
	test -z "$(ls -A "$MNT" | grep -v "^\.nereus\$")"
'

test_expect_success '.nereus/metrics is Prometheus text' '
	cat "$MNT/.nereus/metrics" >"$TRASH/metrics" &&
	test -s "$TRASH/metrics" &&
	grep "^# TYPE " "$TRASH/metrics" >/dev/null &&
	# every sample line: name{labels} value
	! grep -v -E "^(#.*|[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? [-+0-9.eEaInfN]+( [0-9]+)?)?\$" \
		"$TRASH/metrics"
'

test_expect_success '.nereus/status is valid JSON' '
	cat "$MNT/.nereus/status" >"$TRASH/status" &&
	python3 -m json.tool "$TRASH/status" >/dev/null
'

test_expect_success 'write some state' '
	mkdir -p "$MNT/kafka/orders" &&
	printf "batch-1" >>"$MNT/kafka/orders/p0" &&
	printf "batch-2" >>"$MNT/kafka/orders/p0" &&
	setfattr -n user.adapter.ckpt -v 42 "$MNT/kafka/orders/p0" &&
	test "$(cat "$MNT/kafka/orders/p0")" = batch-1batch-2
'

test_expect_success 'clean unmount exits 0' '
	nrs_umount &&
	! nrs_is_mounted
'

test_expect_success 'remount keeps namespace, bytes and xattrs' '
	nrs_mount &&
	test "$(cat "$MNT/kafka/orders/p0")" = batch-1batch-2 &&
	test "$(stat -c %s "$MNT/kafka/orders/p0")" = 14 &&
	test "$(nrs_xattr "$MNT/kafka/orders/p0" user.adapter.ckpt)" = 42 &&
	test "$(nrs_xattr "$MNT/kafka/orders/p0" user.nereus.version)" = 2 &&
	nrs_check_head "$MNT/kafka/orders/p0"
'

test_expect_success 'appends go on after a remount' '
	printf "batch-3" >>"$MNT/kafka/orders/p0" &&
	test "$(cat "$MNT/kafka/orders/p0")" = batch-1batch-2batch-3 &&
	nrs_remount &&
	test "$(cat "$MNT/kafka/orders/p0")" = batch-1batch-2batch-3 &&
	test "$(nrs_xattr "$MNT/kafka/orders/p0" user.nereus.version)" = 3
'

test_expect_success 'unmount at the end is clean' '
	nrs_umount
'

test_done
