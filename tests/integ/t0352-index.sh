#!/bin/sh
test_description='user.nereus.index stays within the 64 KiB xattr limit: adjacent WAL ranges merge, past the bound a "# N more ranges" line; nereusctl index prints it all'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# index.c X2 and X3, core_xattr.c (user.nereus.index.OFF), nereusctl(8).
S=$MNT/s
T=$MNT/t
NEREUSCTL=${NRS_TOOLS:-$nrs_top}/nereusctl

# check_cover FILE START HEAD: FILE's range lines continue one another
# from START to HEAD ("# ..." lines are skipped).
check_cover () {
	awk -v at="$2" -v head="$3" '
		/^#/ { next }
		NF != 4 || $1 + 0 != at || $2 + 0 <= $1 + 0 {
			print "line " NR " does not continue at " at ": " $0; bad = 1; exit
		}
		{ at = $2 + 0 }
		END { if (!bad && at != head) { print "ends at " at ", head " head; bad = 1 }
		      exit bad }' "$1"
}

# value_len FILE NAME: the length of the xattr value (getxattr size).
value_len () {
	r=$(nrs-syscalls getxattr "$1" "$2" | head -c 20) &&
	r=${r#ok } && echo "${r%% *}"
}

test_expect_success 'mount with materialization held off; 5,000 small appends' '
	nrs_mount -o materialize_bytes=1073741824,materialize_age_ms=3600000 &&
	nrs-appender -t 4 -n 1250 -s 33-64 "$S" &&
	test "$(nrs_xattr "$S" user.nereus.version)" = 5000 &&
	test "$(nrs_xattr "$S" user.nereus.wal_bytes)" = "$(stat -c %s "$S")"
'

test_expect_success 'getfattr -d works; adjacent ranges of one segment are one line' '
	getfattr --absolute-names -d "$S" >"$TRASH/dump" &&
	grep -q "^user\\.nereus\\.index=" "$TRASH/dump" &&
	nrs_xattr "$S" user.nereus.index >"$TRASH/index" &&
	cat "$TRASH/index" &&
	test "$(value_len "$S" user.nereus.index)" -le 65536 &&
	check_cover "$TRASH/index" 0 "$(stat -c %s "$S")" &&
	! grep -q "^#" "$TRASH/index" &&
	# one line per WAL segment: no two lines name the same one
	awk "{ split(\$4, t, \":\"); print t[2] }" "$TRASH/index" | sort | uniq -d >"$TRASH/dup" &&
	test ! -s "$TRASH/dup" &&
	test "$(wc -l <"$TRASH/index")" -le 2 &&
	"$NEREUSCTL" index "$S" >"$TRASH/ctl" &&
	test_cmp "$TRASH/index" "$TRASH/ctl"
'

test_expect_success 'remount materializing into 4 KiB objects; 1,200 appends of 4,000 bytes' '
	nrs_remount -o object_size=4096,materialize_bytes=4096,materialize_age_ms=1,compact_size=0 &&
	nrs-appender -t 2 -n 600 -s 4000 "$T" &&
	nrs_wait_for 120 eval "test \"\$(nrs_xattr \"$T\" user.nereus.materialized)\" = \"\$(stat -c %s \"$T\")\"" &&
	nrs_xattr "$T" user.nereus.index | grep -c " obj:"
'

test_expect_success 'past 64 KiB the value ends with "# N more ranges"; getfattr -d works' '
	getfattr --absolute-names -d "$T" >/dev/null &&
	nrs_xattr "$T" user.nereus.index >"$TRASH/tindex" &&
	len=$(value_len "$T" user.nereus.index) &&
	echo "value: $len bytes, $(wc -l <"$TRASH/tindex") lines; $(tail -n 1 "$TRASH/tindex")" &&
	test "$len" -le 65536 &&
	test "$len" -gt 60000 &&
	tail -n 1 "$TRASH/tindex" | grep -E -x "# [1-9][0-9]* more ranges" &&
	test "$(grep -c "^#" "$TRASH/tindex")" = 1 &&
	shown=$(grep -c -v "^#" "$TRASH/tindex") &&
	more=$(tail -n 1 "$TRASH/tindex" | cut -d " " -f 2) &&
	"$NEREUSCTL" index "$T" >"$TRASH/tctl" &&
	! grep -q "^#" "$TRASH/tctl" &&
	test "$(wc -l <"$TRASH/tctl")" = $((shown + more)) &&
	check_cover "$TRASH/tctl" 0 "$(stat -c %s "$T")" &&
	grep -v "^#" "$TRASH/tindex" >"$TRASH/shown" &&
	head -n "$shown" "$TRASH/tctl" >"$TRASH/ctlhead" &&
	test_cmp "$TRASH/shown" "$TRASH/ctlhead"
'

test_expect_success 'user.nereus.index.OFF pages from the range holding OFF; it is read-only and not listed' '
	last=$(grep -v "^#" "$TRASH/tindex" | tail -n 1) &&
	end=$(echo "$last" | cut -d " " -f 2) &&
	nrs_xattr "$T" user.nereus.index.$end | head -n 1 | cut -d " " -f 1 >"$TRASH/first" &&
	test "$(cat "$TRASH/first")" = "$end" &&
	mid=$((end - 1)) &&
	test "$(nrs_xattr "$T" user.nereus.index.$mid | head -n 1)" = "$last" &&
	expect_errno "EPERM|EACCES" setxattr "$T" user.nereus.index.5 1 &&
	expect_errno ENODATA getxattr "$T" user.nereus.index.x &&
	expect_errno ENODATA getxattr "$T" user.nereus.index.-1 &&
	! getfattr --absolute-names -d "$T" | grep -q "^user\\.nereus\\.index\\." &&
	test -z "$(nrs_xattr "$T" user.nereus.index.99999999999)" &&
	expect_errno ENODATA getxattr "$MNT" user.nereus.index.0 &&
	nrs_umount
'

test_done
