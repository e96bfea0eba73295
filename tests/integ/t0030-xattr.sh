#!/bin/sh
test_description='administration through xattrs (DESIGN.md section 4)'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

S=$MNT/k/s

version () {
	nrs_xattr "$1" user.nereus.version
}

# dump F: F's user.nereus.* names, less the three the materializer moves on
# its own (index, materialized, wal_bytes: 5 s after an append by default,
# so a loaded machine can see them change between two dumps).
dump () {
	getfattr --absolute-names -d -m '^user\.nereus\.' -e text -- "$1" |
		grep -v '^user\.nereus\.\(index\|materialized\|wal_bytes\)='
}

readable="epoch head id index materialized profile retention.bytes retention.ms start version wal_bytes"
numeric="epoch head id materialized retention.bytes retention.ms start version wal_bytes"

test_expect_success 'mount, make a stream with three appends' '
	nrs_mount &&
	mkdir "$MNT/k" &&
	printf aaa >>"$S" && printf bbbb >>"$S" && printf ccccc >>"$S" &&
	test "$(cat "$S")" = aaabbbbccccc
'

test_expect_success 'getfattr -d lists every readable name, and not trim' '
	getfattr --absolute-names -d -m "^user\\.nereus\\." "$S" >"$TRASH/dump" &&
	cat "$TRASH/dump" &&
	sed -n "s/^user\\.nereus\\.\\([^=]*\\).*/\\1/p" "$TRASH/dump" | sort >"$TRASH/names" &&
	for n in $readable; do echo $n; done >"$TRASH/expect" &&
	test_cmp "$TRASH/expect" "$TRASH/names" &&
	nrs-syscalls listxattr "$S" | tr " " "\\n" | grep "^user\\.nereus\\." |
		sed "s/^user\\.nereus\\.//" | sort >"$TRASH/names" &&
	test_cmp "$TRASH/expect" "$TRASH/names"
'

test_expect_success 'trim is write-only' '
	expect_errno "ENODATA|EPERM|EACCES" getxattr "$S" user.nereus.trim
'

test_expect_success 'numbers are plain decimal with no newline; profile is local-wal' '
	for n in $numeric; do
		v=$(nrs-syscalls expect ok getxattr "$S" user.nereus.$n) &&
		echo "$n: $v" &&
		echo "$v" | grep -E "^ok [0-9]+ (0|[1-9][0-9]*)\$" >/dev/null &&
		len=${v#ok } && len=${len%% *} && val=${v#ok $len } &&
		test "${#val}" = "$len" || return 1
	done &&
	test "$(nrs-syscalls getxattr "$S" user.nereus.profile)" = "ok 9 local-wal" &&
	test "$(nrs_xattr "$S" user.nereus.head)" = 12 &&
	test "$(nrs_xattr "$S" user.nereus.version)" = 3 &&
	test "$(nrs_xattr "$S" user.nereus.start)" = 0 &&
	test "$(nrs_xattr "$S" user.nereus.epoch)" = 0 &&
	test "$(nrs_xattr "$S" user.nereus.retention.bytes)" = 0 &&
	test "$(nrs_xattr "$S" user.nereus.retention.ms)" = 0 &&
	test "$(nrs_xattr "$S" user.nereus.wal_bytes)" -le 12
'

test_expect_success 'index: "start end gen target" lines covering [start, head)' '
	nrs_xattr "$S" user.nereus.index >"$TRASH/index" &&
	cat "$TRASH/index" &&
	test -s "$TRASH/index" &&
	awk -v start=0 -v head=12 "
		NF != 4 || \$1 !~ /^[0-9]+\$/ || \$2 !~ /^[0-9]+\$/ || \$3 !~ /^[0-9]+\$/ {
			print \"bad line: \" \$0; bad = 1; exit
		}
		\$1 + 0 != at || \$2 + 0 <= \$1 + 0 {
			print \"range \" \$1 \"-\" \$2 \" does not continue at \" at; bad = 1; exit
		}
		{ at = \$2 + 0 }
		END { if (!bad && at != head) { print \"index ends at \" at \", head is \" head; bad = 1 } exit bad }
	" at=0 "$TRASH/index"
'

test_expect_success 'head == st_size, and version +1 for every append' '
	i=0 &&
	while [ $i -lt 10 ]; do
		v=$(version "$S") &&
		printf "%${i}s-" "" >>"$S" &&
		test "$(version "$S")" = $((v + 1)) &&
		nrs_check_head "$S" || return 1
		i=$((i + 1))
	done &&
	test "$(version "$S")" = 13
'

test_expect_success 'a refused append does not move head or version' '
	d=$(dump "$S") &&
	expect_errno ESPIPE pwrite "$S" 0 X &&
	test "$(dump "$S")" = "$d"
'

test_expect_success 'raising the epoch fences handles opened before it (ESTALE); new handles work' '
	printf "<0>" >>"$MNT/k/e" &&
	nrs-syscalls \
		open a "$MNT/k/e" wronly,append -- \
		open c "$MNT/k/e" wronly -- \
		open r "$MNT/k/e" rdonly -- \
		expect ok write a "<a1>" -- \
		expect ok setxattr "$MNT/k/e" user.nereus.epoch 5 -- \
		expect ESTALE write a "<a2>" -- \
		lseek c 0 end -- \
		expect ESTALE write c "<c1>" -- \
		open b "$MNT/k/e" wronly,append -- \
		expect ok write b "<b1>" -- \
		expect ESTALE write a "<a3>" -- \
		expect ok pread r 0 100 >"$TRASH/out" &&
	cat "$TRASH/out" &&
	test "$(cat "$MNT/k/e")" = "<0><a1><b1>" &&
	tail -n 1 "$TRASH/out" | grep "^ok 11 <0><a1><b1>\$" &&
	test "$(nrs_xattr "$MNT/k/e" user.nereus.epoch)" = 5 &&
	printf "<n>" >>"$MNT/k/e" &&
	test "$(cat "$MNT/k/e")" = "<0><a1><b1><n>"
'

test_expect_success 'a lower epoch is EINVAL and changes nothing' '
	d=$(dump "$MNT/k/e") &&
	expect_errno EINVAL setxattr "$MNT/k/e" user.nereus.epoch 4 &&
	expect_errno EINVAL setxattr "$MNT/k/e" user.nereus.epoch 0 &&
	test "$(dump "$MNT/k/e")" = "$d" &&
	expect_errno ok setxattr "$MNT/k/e" user.nereus.epoch 6 &&
	test "$(nrs_xattr "$MNT/k/e" user.nereus.epoch)" = 6
'

# (-1 on retention.* is Kafka's "forever", taken as 0: t0620.)
test_expect_success 'bad numbers are EINVAL and change nothing' '
	d=$(dump "$S") &&
	for n in epoch trim retention.bytes retention.ms; do
		neg=-1 &&
		case $n in retention.*) neg=-2 ;; esac &&
		for bad in "" abc $neg +1 1x 0x10 1.5 18446744073709551616 99999999999999999999999 \
			184467440737095516150; do
			expect_errno EINVAL setxattr "$S" user.nereus.$n "$bad" >/dev/null ||
				{ echo "$n=\"$bad\" accepted"; return 1; }
		done
	done &&
	test "$(dump "$S")" = "$d"
'

test_expect_success 'trim must stay within [start, head]' '
	h=$(nrs_xattr "$S" user.nereus.head) &&
	expect_errno EINVAL setxattr "$S" user.nereus.trim $((h + 1)) &&
	expect_errno ok setxattr "$S" user.nereus.trim 3 &&
	test "$(nrs_xattr "$S" user.nereus.start)" = 3 &&
	expect_errno EINVAL setxattr "$S" user.nereus.trim 2 &&
	expect_errno ok setxattr "$S" user.nereus.trim 3 &&
	test "$(nrs_xattr "$S" user.nereus.start)" = 3 &&
	test "$(nrs_xattr "$S" user.nereus.head)" = "$h" &&
	expect_errno ok setxattr "$S" user.nereus.trim "$h" &&
	test "$(nrs_xattr "$S" user.nereus.start)" = "$h" &&
	nrs_check_head "$S"
'

test_expect_success 'read-only names refuse a set, all with the same errno (EPERM or EACCES)' '
	d=$(dump "$S") &&
	for n in id head version start materialized wal_bytes index; do
		nrs-syscalls setxattr "$S" user.nereus.$n 7
		nrs-syscalls setxattr "$S" user.nereus.$n 7 create
		nrs-syscalls setxattr "$S" user.nereus.$n 7 replace
	done >"$TRASH/ro" &&
	sort "$TRASH/ro" | uniq -c &&
	test "$(sort -u "$TRASH/ro" | wc -l)" = 1 &&
	grep -x -E "EPERM|EACCES" "$TRASH/ro" >/dev/null &&
	for n in id head version start materialized wal_bytes index epoch profile \
		retention.bytes retention.ms; do
		expect_errno "EPERM|EACCES" removexattr "$S" user.nereus.$n || return 1
	done &&
	test "$(dump "$S")" = "$d"
'

test_expect_success 'profile on an empty stream: settable; bad names EINVAL' '
	: >>"$MNT/k/empty" &&
	test "$(nrs_xattr "$MNT/k/empty" user.nereus.profile)" = local-wal &&
	expect_errno ok setxattr "$MNT/k/empty" user.nereus.profile local-wal &&
	test "$(nrs_xattr "$MNT/k/empty" user.nereus.profile)" = local-wal &&
	for bad in "" foo LOCAL-WAL local-wal- "local-wal " bookkeeper; do
		expect_errno EINVAL setxattr "$MNT/k/empty" user.nereus.profile "$bad" ||
			return 1
	done &&
	test "$(nrs_xattr "$MNT/k/empty" user.nereus.profile)" = local-wal
'

test_expect_success 'profile on a non-empty stream: EINVAL, unchanged' '
	expect_errno EINVAL setxattr "$S" user.nereus.profile local-wal &&
	expect_errno "EINVAL|EOPNOTSUPP" setxattr "$S" user.nereus.profile object-wal &&
	test "$(nrs_xattr "$S" user.nereus.profile)" = local-wal
'

test_expect_success 'profile on a directory: stored and inherited by new streams below' '
	mkdir -p "$MNT/p/sub" &&
	: >>"$MNT/p/before" &&
	expect_errno ok setxattr "$MNT/p" user.nereus.profile local-wal &&
	test "$(nrs_xattr "$MNT/p" user.nereus.profile)" = local-wal &&
	for bad in "" foo; do
		expect_errno EINVAL setxattr "$MNT/p" user.nereus.profile "$bad" || return 1
	done &&
	: >>"$MNT/p/sub/new" &&
	test "$(nrs_xattr "$MNT/p/sub/new" user.nereus.profile)" = local-wal
'

test_expect_success 'object-wal: either refused (EOPNOTSUPP/EINVAL) or stored and inherited' '
	mkdir -p "$MNT/o/sub" &&
	r=$(nrs-syscalls setxattr "$MNT/o" user.nereus.profile object-wal) &&
	echo "object-wal on a dir: $r" &&
	case "$r" in
	ok)
		test "$(nrs_xattr "$MNT/o" user.nereus.profile)" = object-wal &&
		nrs-syscalls expect ok open a "$MNT/o/sub/new" wronly,creat &&
		test "$(nrs_xattr "$MNT/o/sub/new" user.nereus.profile)" = object-wal
		;;
	EOPNOTSUPP|EINVAL)
		test "$(nrs-syscalls setxattr "$MNT/k/empty" user.nereus.profile object-wal)" = "$r" &&
		test "$(nrs_xattr "$MNT/k/empty" user.nereus.profile)" = local-wal
		;;
	*)
		false
		;;
	esac
'

test_expect_success 'retention: 0 by default, stored, inherited from the nearest directory' '
	mkdir -p "$MNT/ret/a/b" &&
	: >>"$MNT/ret/a/b/old" &&
	test "$(nrs_xattr "$MNT/ret/a/b/old" user.nereus.retention.ms)" = 0 &&
	setfattr -n user.nereus.retention.ms -v 3600000 "$MNT/ret" &&
	setfattr -n user.nereus.retention.bytes -v 1000000 "$MNT/ret/a" &&
	test "$(nrs_xattr "$MNT/ret" user.nereus.retention.ms)" = 3600000 &&
	test "$(nrs_xattr "$MNT/ret/a" user.nereus.retention.bytes)" = 1000000 &&
	: >>"$MNT/ret/a/b/new" &&
	for f in old new; do
		test "$(nrs_xattr "$MNT/ret/a/b/$f" user.nereus.retention.ms)" = 3600000 &&
		test "$(nrs_xattr "$MNT/ret/a/b/$f" user.nereus.retention.bytes)" = 1000000 ||
			return 1
	done &&
	setfattr -n user.nereus.retention.bytes -v 5 "$MNT/ret/a/b/new" &&
	test "$(nrs_xattr "$MNT/ret/a/b/new" user.nereus.retention.bytes)" = 5 &&
	test "$(nrs_xattr "$MNT/ret/a/b/old" user.nereus.retention.bytes)" = 1000000 &&
	test "$(nrs_xattr "$MNT/ret/a" user.nereus.retention.bytes)" = 1000000 &&
	setfattr -n user.nereus.retention.ms -v 0 "$MNT/ret/a/b" &&
	test "$(nrs_xattr "$MNT/ret/a/b/old" user.nereus.retention.ms)" = 0
'

test_expect_success 'retention: the largest values are stored exactly or refused' '
	for v in 9223372036854775807 18446744073709551615; do
		r=$(nrs-syscalls setxattr "$MNT/ret/a/b/new" user.nereus.retention.ms $v) &&
		case "$r" in
		ok) test "$(nrs_xattr "$MNT/ret/a/b/new" user.nereus.retention.ms)" = $v ;;
		EINVAL) echo "$v refused" ;;
		*) false ;;
		esac || { echo "retention.ms=$v: $r, reads $(nrs_xattr "$MNT/ret/a/b/new" user.nereus.retention.ms)"; return 1; }
	done &&
	setfattr -n user.nereus.retention.ms -v 86400000 "$MNT/ret/a/b/new"
'

test_expect_success 'user.* names: XATTR_CREATE / XATTR_REPLACE rules' '
	nrs-syscalls \
		expect ENODATA getxattr "$S" user.ckpt -- \
		expect ENODATA setxattr "$S" user.ckpt v0 replace -- \
		expect ok setxattr "$S" user.ckpt v1 create -- \
		expect EEXIST setxattr "$S" user.ckpt v9 create -- \
		expect ok getxattr "$S" user.ckpt -- \
		expect ok setxattr "$S" user.ckpt v2 replace -- \
		expect ok setxattr "$S" user.ckpt v3 -- \
		expect ok setxattr "$S" user.other "" -- \
		expect ok setxattrn "$S" user.big 4096 -- \
		expect ok setxattr "$MNT/k" user.dirattr on-a-dir create -- \
		expect ok setxattr "$S" user.gone x -- \
		expect ok removexattr "$S" user.gone -- \
		expect ENODATA removexattr "$S" user.gone -- \
		expect ENODATA getxattr "$S" user.gone >"$TRASH/out" &&
	sed -n 5p "$TRASH/out" | grep "^ok 2 v1\$" &&
	test "$(nrs_xattr "$S" user.ckpt)" = v3 &&
	test "$(nrs-syscalls getxattr "$S" user.other)" = "ok 0" &&
	test "$(nrs_xattr "$S" user.big | wc -c)" = 4096 &&
	test "$(nrs_xattr "$MNT/k" user.dirattr)" = on-a-dir &&
	nrs-syscalls listxattr "$S" | tr " " "\\n" | grep "^user\\.[^n]" | sort >"$TRASH/names" &&
	printf "user.big\\nuser.ckpt\\nuser.other\\n" >"$TRASH/expect" &&
	test_cmp "$TRASH/expect" "$TRASH/names"
'

test_expect_success 'user.* values are bytes: binary-safe round trip' '
	printf "a\\001b\\377c\\nd" >"$TRASH/bin" &&
	setfattr -n user.bin -v "0x$(od -An -tx1 "$TRASH/bin" | tr -d " \\n")" "$S" &&
	getfattr --absolute-names --only-values -n user.bin "$S" | cmp - "$TRASH/bin"
'

test_expect_success 'everything set survives a remount' '
	for f in "$S" "$MNT/k/e" "$MNT/k/empty" "$MNT/p" "$MNT/p/sub/new" "$MNT/ret" "$MNT/ret/a" \
		"$MNT/ret/a/b/old" "$MNT/ret/a/b/new" "$MNT/k"; do
		getfattr --absolute-names -d -m - -e hex "$f" || return 1
	done >"$TRASH/before" &&
	nrs_remount &&
	for f in "$S" "$MNT/k/e" "$MNT/k/empty" "$MNT/p" "$MNT/p/sub/new" "$MNT/ret" "$MNT/ret/a" \
		"$MNT/ret/a/b/old" "$MNT/ret/a/b/new" "$MNT/k"; do
		getfattr --absolute-names -d -m - -e hex "$f" || return 1
	done >"$TRASH/after" &&
	grep -v "user\\.nereus\\.\\(index\\|materialized\\|wal_bytes\\)=" "$TRASH/before" >"$TRASH/b" &&
	grep -v "user\\.nereus\\.\\(index\\|materialized\\|wal_bytes\\)=" "$TRASH/after" >"$TRASH/a" &&
	test_cmp "$TRASH/b" "$TRASH/a"
'

test_expect_success 'after the remount: the epoch still fences, CREATE/REPLACE rules hold' '
	expect_errno EINVAL setxattr "$MNT/k/e" user.nereus.epoch 5 &&
	expect_errno EEXIST setxattr "$S" user.ckpt x create &&
	expect_errno ok setxattr "$S" user.ckpt v4 replace &&
	test "$(nrs_xattr "$S" user.ckpt)" = v4 &&
	printf "<m>" >>"$MNT/k/e" &&
	test "$(cat "$MNT/k/e")" = "<0><a1><b1><n><m>"
'

test_expect_success 'unmount' '
	nrs_umount
'

test_done
