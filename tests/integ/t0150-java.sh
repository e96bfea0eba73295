#!/bin/sh
test_description='the Java 17 example adapter (JDK only), compiled and run against a mount'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

SRC=${NRS_CONTRIB:-$nrs_top/contrib}/adapters/java/NereusAdapter.java

# Only a machine without a JDK skips; in CI (CI=true) that is a failure.
for t in javac java; do
	command -v $t >/dev/null 2>&1 ||
		nrs_skip_all "no $t (package default-jdk-headless)"
done

test_expect_success 'compile NereusAdapter.java' '
	mkdir "$TRASH/classes" &&
	javac -Xlint:all -Werror -d "$TRASH/classes" "$SRC"
'

test_expect_success 'mount' '
	nrs_mount &&
	mkdir -p "$MNT/kafka/orders"
'

test_expect_success 'run it on a new stream' '
	java -cp "$TRASH/classes" NereusAdapter "$MNT/kafka/orders/p0" >"$TRASH/out" &&
	cat "$TRASH/out" &&
	grep -q "^NereusAdapter: OK" "$TRASH/out" &&
	test "$(nrs_xattr "$MNT/kafka/orders/p0" user.nereus.epoch)" = 2 &&
	test "$(nrs_xattr "$MNT/kafka/orders/p0" user.adapter.checkpoint)" = 52 &&
	test "$(tail -n 1 "$MNT/kafka/orders/p0")" = "B batch 0000" &&
	nrs_check_head "$MNT/kafka/orders/p0"
'

test_expect_success 'run it again on the same stream (epochs 3 and 4, offsets from the head)' '
	java -cp "$TRASH/classes" NereusAdapter "$MNT/kafka/orders/p0" &&
	test "$(nrs_xattr "$MNT/kafka/orders/p0" user.nereus.epoch)" = 4 &&
	test "$(grep -c "batch" "$MNT/kafka/orders/p0")" = 10
'

test_expect_success 'unmount' '
	nrs_umount
'

test_done
