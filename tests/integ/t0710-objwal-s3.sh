#!/bin/sh
test_description='the object WAL on S3 (a real s3rver): profile, ack boundary, remount, kill -9, crash points, reclaim, a stopped store'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/s3.sh"

nrs_s3_start
. "$nrs_lib/objwal.sh"

# The ack boundary with the store stopped: an object-wal append is not
# acknowledged -- it fails ETIMEDOUT once object_wal_timeout_ms is past --
# while a local-wal append beside it never waits for the bucket; and what
# failed is whole or absent afterwards.
test_expect_success 'store stopped: object-wal appends fail ETIMEDOUT, local-wal ones go on' '
	nrs_mount -o "$HOLD,object_wal_timeout_ms=1500$OBJ_OPTS" &&
	printf "before." >>"$MNT/kafka/orders/o" &&
	nrs_s3_stop &&
	t0=$(date +%s%N) &&
	printf "local" >>"$MNT/local/l1" &&
	t1=$(date +%s%N) &&
	test $(( (t1 - t0) / 1000000 )) -lt 1000 &&
	expect_errno ETIMEDOUT append "$MNT/kafka/orders/o" failed. &&
	t2=$(date +%s%N) &&
	test $(( (t2 - t1) / 1000000 )) -lt 15000 &&
	nrs_s3_restart &&
	printf "after." >>"$MNT/kafka/orders/o" &&
	case $(cat "$MNT/kafka/orders/o") in
	before.after.|before.failed.after.) ;;
	*) echo "got: $(cat "$MNT/kafka/orders/o")"; false ;;
	esac &&
	cp "$MNT/kafka/orders/o" "$TRASH/o.seen" &&
	nrs_kill9 &&
	nrs_mount -o "$HOLD$OBJ_OPTS" &&
	cmp "$TRASH/o.seen" "$MNT/kafka/orders/o" &&
	test "$(cat "$MNT/local/l1")" = local &&
	nrs_umount
'
test_done
