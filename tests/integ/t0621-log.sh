#!/bin/sh
test_description='what users send reaches the log escaped, one line per message, and a call site repeated by the thousand writes a bounded number of lines (log.c LG1, LG2; issue 12 item 4)'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

nl='
'
forged='nereusfs[1]: error: forged'
bad="user.nereus.x${nl}${forged}"	# an xattr name no stream has

test_expect_success 'mount; a stream whose name holds a newline and an escape sequence' '
	nrs_mount &&
	name="a${nl}${forged}$(printf "\\033[2J")" &&
	printf x >>"$MNT/$name" &&
	test "$(cat "$MNT/$name")" = x &&
	ls "$MNT" | grep -q "^a\$"
'

test_expect_success 'a logged error naming it: one escaped line, no forged one' '
	expect_errno EINVAL setxattr "$MNT/$name" "$bad" 1 &&
	expect_errno EINVAL setxattr "$MNT/$name" "user.nereus.$name" 1 &&
	nrs_wait_for 5 grep -qF "no attribute user.nereus.x\\x0a$forged" "$LOG" &&
	grep -qF "no attribute user.nereus.a\\x0a$forged\\x1b[2J" "$LOG" &&
	! grep -q "^nereusfs\\[1\\]: error: forged" "$LOG" &&
	! grep -q "$(printf "\\033")" "$LOG"
'

# STEPS N: N steps of nrs-syscalls, each a setxattr the daemon refuses
# with a log line, one word a line.
steps () {
	awk -v f="$MNT/s" -v n="$1" "BEGIN { for (i = 0; i < n; i++) {
		if (i) print \"--\"
		printf \"expect\\nEINVAL\\nsetxattr\\n%s\\nuser.nereus.nope%d\\n1\\n\", f, i % 7
	} }"
}

test_expect_success '20,000 refused setxattr calls: a bounded number of lines, then one that counts the rest' '
	printf y >>"$MNT/s" &&
	! grep -q "no attribute user.nereus.nope" "$LOG" &&
	for i in 1 2 3 4; do
		(IFS="$nl"; nrs-syscalls $(steps 5000)) >/dev/null || return 1
	done &&
	lines=$(grep -c "no attribute user.nereus.nope" "$LOG") &&
	echo "# $lines lines for 20000 calls" &&
	test "$lines" -ge 1 &&
	test "$lines" -le 40 &&
	test "$(cat "$MNT/s")" = y
'

test_expect_success 'clean unmount: the held back lines are counted in the log' '
	nrs_umount &&
	grep "more in the last 10 s: inode [0-9]*: no attribute user.nereus.nope" "$LOG" >"$TRASH/sum" &&
	cat "$TRASH/sum" &&
	awk "{ for (i = 1; i <= NF; i++) if (\$i == \"more\") n += \$(i - 1) } END { print n }" "$TRASH/sum" >"$TRASH/n" &&
	shown=$(grep -v "more in the last" "$LOG" | grep -c "no attribute user.nereus.nope") &&
	test $(($(cat "$TRASH/n") + shown)) = 20000
'
# A disk that refuses every append (a WAL reserve larger than any disk,
# wal_local_append.c WA5): each refused batch used to log one error line.
appends () {
	awk -v f="$MNT/full" -v n="$1" "BEGIN { for (i = 0; i < n; i++) {
		if (i) print \"--\"
		printf \"expect\nENOSPC\nappend\n%s\nx\n\", f
	} }"
}

test_expect_success 'a full disk refusing 3,000 appends: a bounded number of lines' '
	nrs_mount &&
	: >"$MNT/full" &&
	nrs_umount &&
	# a reserve no disk has: every append fails ENOSPC (and so would
	# creating the stream, meta/sqlite.c MS1: it is made before)
	nrs_mount -o wal_reserve=4611686018427387904 &&
	(IFS="$nl"; nrs-syscalls $(appends 3000)) >/dev/null &&
	test "$(stat -c %s "$MNT/full")" = 0 &&
	lines=$(grep -c "WAL write of .* failed" "$LOG") &&
	echo "# $lines lines for 3000 refused appends" &&
	test "$lines" -ge 1 &&
	test "$lines" -le 22 &&
	nrs_umount &&
	grep -q "more in the last 10 s: WAL write of" "$LOG"
'
test_done
