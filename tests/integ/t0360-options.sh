#!/bin/sh
test_description='strict numbers (parse.h N1): -o options, user.nereus.* values, nereusctl and nereusfs-fsck; nereusctl options anywhere, --help, --version, exit statuses'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

PATH=${NRS_TOOLS:-$nrs_top}:$PATH
S=$MNT/ns/s

# A start that must fail: exit 1, nothing mounted, the message on stderr
# (a daemon that wrongly starts is stopped after 10 s: the step fails).
refused_start () {
	test_must_fail timeout 10 "$NEREUSFS" -f -o "data=$DATA" "$@" "$MNT" \
		2>"$TRASH/err" &&
	cat "$TRASH/err" &&
	! nrs_is_mounted
}

test_expect_success 'numeric -o options: sign, space, prefix, suffix, overflow refused by name' '
	for v in -1 " -1" +5 " 5" "5 " 0x10 64M 18446744073709551616 ""; do
		refused_start -o "cache_size=$v" &&
		grep -q "cache_size must be a decimal number from 1048576 to" \
			"$TRASH/err" || return 1
	done &&
	refused_start -o "materializers=+2" &&
	grep -q "materializers must be a decimal number from 1 to 64, not .+2." \
		"$TRASH/err" &&
	refused_start -o "gc_grace_ms=-1" &&
	grep -q "gc_grace_ms must be" "$TRASH/err"
'

test_expect_success 'disk_cache must be absolute; data= must not be empty' '
	refused_start -o "disk_cache=relative" &&
	grep -q "disk_cache must be an absolute path, not .relative." "$TRASH/err" &&
	test_must_fail timeout 10 "$NEREUSFS" -f -o "data=" "$MNT" 2>"$TRASH/err" &&
	grep -q "data= needs a directory" "$TRASH/err" &&
	! nrs_is_mounted
'

test_expect_success 'a plain value still mounts' '
	nrs_mount -o cache_size=16777216,materializers=2 &&
	mkdir "$MNT/ns" &&
	printf hello >"$S"
'

test_expect_success 'user.nereus.* numbers: the same parser (EINVAL, nothing changed)' '
	for v in -1 +5 " 5" "5 " 0x10 18446744073709551616; do
		expect_errno EINVAL setxattr "$S" user.nereus.trim "$v" &&
		expect_errno EINVAL setxattr "$S" user.nereus.epoch "$v" || return 1
	done &&
	test "$(getfattr --only-values -n user.nereus.start "$S")" = 0 &&
	test "$(getfattr --only-values -n user.nereus.epoch "$S")" = 0
'

# Run nereusctl, keep its exit status in rc and stderr in $TRASH/err.
ctl () {
	nereusctl "$@" >"$TRASH/out" 2>"$TRASH/err"
	rc=$?
}

test_expect_success 'nereusctl: options anywhere on the line' '
	ctl stat --json "$S" && test "$rc" = 0 &&
	python3 -c "import json,sys; assert json.load(open(sys.argv[1]))[\"head\"] == 5" "$TRASH/out" &&
	ctl stat "$S" --json && test "$rc" = 0 &&
	python3 -c "import json,sys; assert json.load(open(sys.argv[1]))[\"head\"] == 5" "$TRASH/out" &&
	ctl --json stat "$S" && test "$rc" = 0 &&
	printf " world" >"$TRASH/in" &&
	ctl append --expect 5 "$S" <"$TRASH/in" && test "$rc" = 0 &&
	test "$(cat "$S")" = "hello world" &&
	{ timeout 1 nereusctl tail "$S" -f >"$TRASH/tail"; trc=$?; } ;
	test "$trc" = 124 &&
	test "$(cat "$TRASH/tail")" = "hello world"
'

test_expect_success 'nereusctl --help, --version: stdout, exit 0' '
	ctl --help && test "$rc" = 0 &&
	grep -q "^usage: nereusctl stat PATH" "$TRASH/out" &&
	grep -q "Exit status" "$TRASH/out" &&
	ctl stat --help && test "$rc" = 0 &&
	ctl --version && test "$rc" = 0 &&
	grep -q "^nereusctl [0-9]" "$TRASH/out"
'

test_expect_success 'nereusctl usage errors exit 2, with a message' '
	for args in "" "bogus $S" "stat" "stat $S extra" "trim $S --json 1" \
		    "stat --nope $S" "append $S --expect" "fence $S -1" \
		    "fence $S +1" "trim $S 0x10" "fence $S 18446744073709551616" \
		    "tail $S --expect 3"; do
		# shellcheck disable=SC2086 # word splitting is the point
		ctl $args;
		test "$rc" = 2 || { echo "nereusctl $args: exit $rc"; return 1; }
		test -s "$TRASH/err" || return 1
	done &&
	ctl fence "$S" 18446744073709551616; test "$rc" = 2 &&
	grep -q "EPOCH: too large for 64 bits" "$TRASH/err" &&
	ctl stat --nope "$S"; test "$rc" = 2 &&
	grep -q "unknown option" "$TRASH/err"
'

test_expect_success 'nereusctl exit statuses 1, 3, 4' '
	ctl stat "$MNT/ns/missing"; test "$rc" = 1 &&
	ctl fence "$S" 5 && test "$rc" = 0 &&
	ctl fence "$S" 4; test "$rc" = 3 &&
	ctl append "$S" --expect 3 <"$TRASH/in"; test "$rc" = 4
'

test_expect_success 'nereusfs-fsck --gc-grace-ms: the same parser' '
	nrs_umount &&
	for v in -1 +5 " 5" 0x10 0 18446744073709551616; do
		"$NRS_FSCK" --gc-grace-ms="$v" "$DATA" 2>"$TRASH/err";
		test $? = 2 || return 1
		grep -q "gc-grace-ms must be a number" "$TRASH/err" || return 1
	done &&
	"$NRS_FSCK" --gc-grace-ms=60000 "$DATA"
'

test_done
