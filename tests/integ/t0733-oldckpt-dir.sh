#!/bin/sh
test_description='recover from a bucket whose last checkpoint an older release wrote (schema 3): installed upgraded (sqlite_ckpt.c SN3), then the object WAL after it'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/dirstore.sh"
. "$nrs_lib/objlib.sh"

NRS_MOUNT_TIMEOUT=${NRS_MOUNT_TIMEOUT_OWAL:-90}
mkdir -m 700 "$TRASH/bucket"
B=dir:$TRASH/bucket
OPTS="materialize_age_ms=3600000,materialize_bytes=1099511627776,checkpoint_ms=300,object_wal_timeout_ms=20000,owner_lease_ms=4000,objects=$TRASH/bucket"
LATE=$(echo "$OPTS" | sed 's/checkpoint_ms=300/checkpoint_ms=3600000,checkpoint_bytes=1099511627776/')
K=$MNT/kafka
acks=$TRASH/acks

skipped () {
	python3 -c 'import json, sys
print(json.load(open(sys.argv[1]))["checkpoints"]["skipped"])' \
		"$MNT/.nereus/status"
}
settled () { [ "$(skipped)" -gt "$1" ]; }

test_expect_success 'a namespace and a checkpoint; appends after it; the host is lost' '
	nrs_mount -o "$OPTS" &&
	mkdir -p "$K/orders" &&
	setfattr -n user.nereus.profile -v object-wal "$K" &&
	: >"$K/orders/p0" && : >"$K/orders/p1" &&
	mkdir "$K/orders/sub" && : >"$K/orders/sub/x" &&
	setfattr -n user.adapter.checkpoint -v "offset=42" "$K/orders/p0" &&
	chmod 0640 "$K/orders/p1" &&
	n=$(skipped) &&
	nrs_wait_for 20 settled "$n" &&
	nrs_umount &&
	nrs_mount -o "$LATE" &&
	nrs-appender -t 2 -n 30 -s 33-4000 -w 100 -a "$acks" \
		"$K/orders/p0" "$K/orders/p1" &&
	nrs_kill9 &&
	rm -rf "$DATA"
'

test_expect_success 'the last checkpoint, stored again as schema 3 would have it' '
	nrs-ckpt show "$B" >"$TRASH/before" &&
	nrs-ckpt old "$B" 3 >"$TRASH/old" &&
	cat "$TRASH/before" "$TRASH/old" &&
	nrs-ckpt show "$B" >"$TRASH/after" &&
	cmp "$TRASH/old" "$TRASH/after" &&
	cov=$(sed -n "s/.* covered \([0-9]*\) .*/\1/p" "$TRASH/before") &&
	grep -q " covered $cov " "$TRASH/after"
'

test_expect_success 'recover installs it upgraded and replays the object WAL onto it' '
	mkdir -m 700 "$DATA" &&
	nrs_mount -o "recover,$OPTS" &&
	grep -q "meta: the checkpoint upgraded from schema 3 to " "$LOG" &&
	grep -q "recover: done" "$LOG" &&
	nrs_verify_records -u 1 -a "$acks" "$K/orders/p0" "$K/orders/p1" &&
	test "$(wc -l <"$acks")" = 60 &&
	test "$(nrs_xattr "$K/orders/p0" user.adapter.checkpoint)" = "offset=42" &&
	test "$(nrs_xattr "$K/orders/p0" user.nereus.profile)" = object-wal &&
	test "$(stat -c %a "$K/orders/p1")" = 640 &&
	test -e "$K/orders/sub/x"
'

test_expect_success 'the recovered store is of our schema, takes changes, and remounts' '
	mkdir "$K/after" &&
	nrs-appender -t 2 -n 10 -w 200 -a "$TRASH/acks2" "$K/orders/p0" "$K/orders/p1" &&
	nrs_umount &&
	nrs_mount -o "$OPTS" &&
	test -d "$K/after" &&
	nrs_verify_records -u 1 -a "$acks" -a "$TRASH/acks2" "$K/orders/p0" "$K/orders/p1" &&
	nrs_umount
'
test_done
