#!/bin/sh
test_description='XATTR_CREATE / XATTR_REPLACE on every user.nereus.* name and on ordinary ones; per-inode bounds on user.* (ENOSPC)'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# core_xattr.c XA1: CREATE on a name that exists is EEXIST, REPLACE on one
# that does not is ENODATA.  epoch and a stream's profile always exist; a
# directory's profile and retention.* exist once set on that inode (an
# inherited value does not count); trim takes neither flag (EINVAL).
D=$MNT/d
S=$MNT/d/s
E=$MNT/d/empty

test_expect_success 'mount; a directory, a stream with data, an empty stream' '
	nrs_mount &&
	mkdir "$D" &&
	printf abcdef >>"$S" &&
	: >>"$E"
'

test_expect_success 'epoch always exists: CREATE EEXIST, REPLACE sets' '
	expect_errno EEXIST setxattr "$S" user.nereus.epoch 5 create &&
	test "$(nrs_xattr "$S" user.nereus.epoch)" = 0 &&
	expect_errno ok setxattr "$S" user.nereus.epoch 5 replace &&
	test "$(nrs_xattr "$S" user.nereus.epoch)" = 5 &&
	expect_errno ok setxattr "$S" user.nereus.epoch 6
'

test_expect_success 'a stream profile always exists: CREATE EEXIST, REPLACE sets' '
	expect_errno EEXIST setxattr "$E" user.nereus.profile local-wal create &&
	expect_errno EEXIST setxattr "$S" user.nereus.profile local-wal create &&
	expect_errno ok setxattr "$E" user.nereus.profile local-wal replace &&
	test "$(nrs_xattr "$E" user.nereus.profile)" = local-wal
'

test_expect_success 'a directory profile exists once set' '
	expect_errno ENODATA setxattr "$D" user.nereus.profile local-wal replace &&
	expect_errno ENODATA getxattr "$D" user.nereus.profile &&
	expect_errno ok setxattr "$D" user.nereus.profile local-wal create &&
	test "$(nrs_xattr "$D" user.nereus.profile)" = local-wal &&
	expect_errno EEXIST setxattr "$D" user.nereus.profile local-wal create &&
	expect_errno ok setxattr "$D" user.nereus.profile local-wal replace
'

test_expect_success 'retention exists once set on that inode; an inherited value does not count' '
	for n in retention.bytes retention.ms; do
		expect_errno ENODATA setxattr "$D" user.nereus.$n 100 replace &&
		expect_errno ok setxattr "$D" user.nereus.$n 100 create &&
		expect_errno EEXIST setxattr "$D" user.nereus.$n 200 create &&
		test "$(nrs_xattr "$D" user.nereus.$n)" = 100 &&
		expect_errno ok setxattr "$D" user.nereus.$n 300 replace &&
		test "$(nrs_xattr "$D" user.nereus.$n)" = 300 &&
		test "$(nrs_xattr "$S" user.nereus.$n)" = 300 &&
		expect_errno ENODATA setxattr "$S" user.nereus.$n 400 replace &&
		test "$(nrs_xattr "$S" user.nereus.$n)" = 300 &&
		expect_errno ok setxattr "$S" user.nereus.$n 400 create &&
		expect_errno EEXIST setxattr "$S" user.nereus.$n 500 create &&
		test "$(nrs_xattr "$S" user.nereus.$n)" = 400 &&
		expect_errno ok setxattr "$S" user.nereus.$n 0 replace || return 1
	done
'

test_expect_success 'trim takes neither flag (EINVAL); without one it trims' '
	expect_errno EINVAL setxattr "$S" user.nereus.trim 2 create &&
	expect_errno EINVAL setxattr "$S" user.nereus.trim 2 replace &&
	test "$(nrs_xattr "$S" user.nereus.start)" = 0 &&
	expect_errno ok setxattr "$S" user.nereus.trim 2 &&
	test "$(nrs_xattr "$S" user.nereus.start)" = 2
'

test_expect_success 'read-only names: EPERM with either flag; both flags: EINVAL' '
	for n in id head version start materialized wal_bytes index; do
		expect_errno "EPERM|EACCES" setxattr "$S" user.nereus.$n 7 create &&
		expect_errno "EPERM|EACCES" setxattr "$S" user.nereus.$n 7 replace ||
			return 1
	done &&
	for n in epoch profile retention.bytes retention.ms trim; do
		expect_errno EINVAL setxattr "$S" user.nereus.$n 7 both || return 1
	done &&
	expect_errno EINVAL setxattr "$S" user.plain 7 both
'

test_expect_success 'ordinary user.* names: the same rules, on a stream and a directory' '
	for f in "$S" "$D"; do
		nrs-syscalls \
			expect ENODATA setxattr "$f" user.ckpt v0 replace -- \
			expect ok setxattr "$f" user.ckpt v1 create -- \
			expect EEXIST setxattr "$f" user.ckpt v9 create -- \
			expect ok setxattr "$f" user.ckpt v2 replace -- \
			expect ok setxattr "$f" user.ckpt v3 -- \
			expect ok removexattr "$f" user.ckpt -- \
			expect ENODATA setxattr "$f" user.ckpt v4 replace >/dev/null ||
			return 1
	done
'

# sqlite_xattr.c MS2: per inode at most 128 user.* names and 256 KiB of
# names plus values; past either ENOSPC, and nothing changes.
test_expect_success 'per inode: 128 names, the 129th is ENOSPC; a remove makes room' '
	: >>"$MNT/many" &&
	i=0 && steps= &&
	while [ $i -lt 128 ]; do
		steps="$steps expect ok setxattr $MNT/many user.n$i v --" &&
		i=$((i + 1))
	done &&
	nrs-syscalls $steps expect ENOSPC setxattr "$MNT/many" user.more v >/dev/null &&
	test "$(getfattr --absolute-names -d "$MNT/many" | grep -c "^user\\.n[0-9]")" = 128 &&
	expect_errno ENODATA getxattr "$MNT/many" user.more &&
	expect_errno ok setxattr "$MNT/many" user.n0 "a new value" &&
	expect_errno ok removexattr "$MNT/many" user.n1 &&
	expect_errno ok setxattr "$MNT/many" user.more v &&
	expect_errno ENOSPC setxattr "$MNT/many" user.more2 v &&
	: >>"$MNT/other" &&
	expect_errno ok setxattr "$MNT/other" user.more2 v
'

test_expect_success 'per inode: 256 KiB of names and values; past it ENOSPC, shrinking works' '
	: >>"$MNT/big" &&
	nrs-syscalls \
		expect ok setxattrn "$MNT/big" user.b0 65536 -- \
		expect ok setxattrn "$MNT/big" user.b1 65536 -- \
		expect ok setxattrn "$MNT/big" user.b2 65536 -- \
		expect ENOSPC setxattrn "$MNT/big" user.b3 65536 -- \
		expect ok setxattrn "$MNT/big" user.b3 65000 -- \
		expect ENOSPC setxattrn "$MNT/big" user.b3 65536 -- \
		expect ENOSPC setxattrn "$MNT/big" user.c 1000 -- \
		expect ok setxattrn "$MNT/big" user.b3 100 -- \
		expect ok setxattrn "$MNT/big" user.c 1000 -- \
		expect ok removexattr "$MNT/big" user.b0 -- \
		expect ok setxattrn "$MNT/big" user.b3 65536 >/dev/null &&
	test "$(nrs-syscalls getxattr "$MNT/big" user.b3 | cut -c1-9)" = "ok 65536 "
'

test_expect_success 'the bounds and the flags hold after a remount' '
	nrs_remount &&
	expect_errno ENOSPC setxattr "$MNT/many" user.more2 v &&
	expect_errno EEXIST setxattr "$S" user.nereus.retention.ms 1 create &&
	expect_errno ENODATA setxattr "$E" user.nereus.retention.ms 1 replace &&
	expect_errno EEXIST setxattr "$D" user.nereus.profile local-wal create &&
	nrs_umount
'

test_done
