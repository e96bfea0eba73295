#!/bin/sh
test_description='adapter ioctls (nereusfs.h): bind, expect, snapshot, errors; the C example adapter'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

LEADER=${NRS_CONTRIB_BUILD:-$nrs_top/contrib}/adapters/c/leader
S=$MNT/k/p0

# ioctl OP PATH... in Python (lib.sh requires python3): each line of the
# script prints one result, an errno name or the value, so steps compare
# whole transcripts.
ioc () {
	python3 - "$@" <<'PY'
import errno, fcntl, os, struct, sys
BIND, EXPECT, SNAP = 0x40104ea0, 0x40104ea1, 0x80404ea2
def call(fd, cmd, arg):
    try:
        return fcntl.ioctl(fd, cmd, arg)
    except OSError as e:
        return errno.errorcode[e.errno]
def bind(fd, epoch, abi=1, flags=0):
    r = call(fd, BIND, struct.pack('<IIQ', abi, flags, epoch))
    return r if isinstance(r, str) else 'ok'
def expect(fd, off, abi=1, flags=0):
    r = call(fd, EXPECT, struct.pack('<IIQ', abi, flags, off))
    return r if isinstance(r, str) else 'ok'
def snap(fd):
    r = call(fd, SNAP, bytes(64))
    if isinstance(r, str):
        return r
    abi, fl, head, ver, start, ep, hep, exp, res = struct.unpack('<IIQQQQQQQ', r)
    return 'abi=%d head=%d version=%d start=%d epoch=%d handle=%d expect=%s%s' % (
        abi, head, ver, start, ep, hep,
        {2**64 - 1: 'none', 2**64 - 2: 'broken'}.get(exp, exp),
        ' follow' if fl & 2 else '')
def write(fd, data):
    try:
        return 'wrote %d' % os.write(fd, data)
    except OSError as e:
        return errno.errorcode[e.errno]
exec(sys.argv[1])
PY
}

test_expect_success 'mount, a stream with 10 bytes' '
	nrs_mount &&
	mkdir "$MNT/k" &&
	printf 0123456789 >"$S"
'

test_expect_success 'snapshot == the xattrs, on a read-only handle' '
	ioc "fd = os.open(\"$S\", os.O_RDONLY); print(snap(fd))" >"$TRASH/out" &&
	echo "abi=1 head=10 version=1 start=0 epoch=0 handle=0 expect=none" >"$TRASH/want" &&
	test_cmp "$TRASH/want" "$TRASH/out" &&
	test "$(nrs_xattr "$S" user.nereus.head)" = 10 &&
	test "$(nrs_xattr "$S" user.nereus.version)" = 1
'

test_expect_success 'bind: raise, same again, lower is ESTALE; the handle writes under it' '
	ioc "
a = os.open(\"$S\", os.O_WRONLY | os.O_APPEND)
print(bind(a, 5)); print(bind(a, 5)); print(bind(a, 4))
print(snap(a)); print(write(a, b\"ab\"))
" >"$TRASH/out" &&
	cat >"$TRASH/want" <<-\EOF &&
	ok
	ok
	ESTALE
	abi=1 head=10 version=1 start=0 epoch=5 handle=5 expect=none
	wrote 2
	EOF
	test_cmp "$TRASH/want" "$TRASH/out" &&
	test "$(nrs_xattr "$S" user.nereus.epoch)" = 5
'

test_expect_success 'a bind by another handle fences this one; appends before it complete' '
	ioc "
a = os.open(\"$S\", os.O_WRONLY | os.O_APPEND)
print(write(a, b\"cd\"))
b = os.open(\"$S\", os.O_WRONLY)
print(bind(b, 6)); print(write(a, b\"late\")); print(snap(a))
print(bind(a, 6)); print(write(a, b\"ef\"))
" >"$TRASH/out" &&
	cat >"$TRASH/want" <<-\EOF &&
	wrote 2
	ok
	ESTALE
	abi=1 head=14 version=3 start=0 epoch=6 handle=5 expect=none
	ok
	wrote 2
	EOF
	test_cmp "$TRASH/want" "$TRASH/out" &&
	test "$(cat "$S")" = 0123456789abcdef
'

test_expect_success 'expect: the next write lands there or fails ESPIPE, with or without O_APPEND' '
	ioc "
a = os.open(\"$S\", os.O_WRONLY | os.O_APPEND)
print(expect(a, 3)); print(snap(a)); print(write(a, b\"X\"))
print(write(a, b\"g\"))
print(expect(a, 17)); print(write(a, b\"h\"))
p = os.open(\"$S\", os.O_WRONLY)
print(expect(p, 18)); print(write(p, b\"i\"))
print(expect(p, 18)); print(write(p, b\"Y\"))
print(expect(a, 19)); print(expect(a, 0, flags=1)); print(snap(a))
print(write(a, b\"j\"))
" >"$TRASH/out" &&
	cat >"$TRASH/want" <<-\EOF &&
	ok
	abi=1 head=16 version=4 start=0 epoch=6 handle=6 expect=3
	ESPIPE
	wrote 1
	ok
	wrote 1
	ok
	wrote 1
	ok
	ESPIPE
	ok
	ok
	abi=1 head=19 version=7 start=0 epoch=6 handle=6 expect=none
	wrote 1
	EOF
	test_cmp "$TRASH/want" "$TRASH/out" &&
	test "$(cat "$S")" = 0123456789abcdefghij
'

test_expect_success 'bad arguments: EINVAL, EBADF, ENOTTY' '
	ioc "
r = os.open(\"$S\", os.O_RDONLY)
w = os.open(\"$S\", os.O_WRONLY)
print(bind(r, 9)); print(expect(r, 0))
print(bind(w, 9, abi=2)); print(bind(w, 9, flags=1)); print(expect(w, 0, flags=4))
print(expect(w, 2**64 - 1))
print(call(w, 0x40104eaf, bytes(16)))
d = os.open(\"$MNT/k\", os.O_RDONLY)
print(snap(d))
v = os.open(\"$MNT/.nereus/status\", os.O_RDONLY)
print(snap(v))
print(snap(r))
" >"$TRASH/out" &&
	cat >"$TRASH/want" <<-\EOF &&
	EBADF
	EBADF
	EINVAL
	EINVAL
	EINVAL
	EINVAL
	ENOTTY
	ENOTTY
	ENOTTY
	abi=1 head=20 version=8 start=0 epoch=6 handle=6 expect=none
	EOF
	test_cmp "$TRASH/want" "$TRASH/out"
'

# EX1 (core_adapter.c): the expectation follows the handle's own appends,
# and a failed one breaks it -- the write after it must not land where the
# failed one would have ended (here: after another writer's 2 bytes).
test_expect_success 'expect, following: one EXPECT for many writes; a failure breaks it' '
	F=$MNT/k/follow &&
	: >"$F" &&
	ioc "
f = os.open(\"$F\", os.O_WRONLY | os.O_APPEND)
print(expect(f, 0, flags=2)); print(snap(f))
print(write(f, b\"aa\")); print(write(f, b\"bb\")); print(snap(f))
o = os.open(\"$F\", os.O_WRONLY | os.O_APPEND)
print(write(o, b\"cc\"))
print(write(f, b\"dd\")); print(snap(f)); print(write(f, b\"ee\"))
print(expect(f, 6, flags=2)); print(write(f, b\"ff\"))
print(expect(f, 0, flags=1)); print(snap(f)); print(write(f, b\"gg\"))
print(expect(f, 0, flags=3)); print(snap(f))
" >"$TRASH/out" &&
	cat >"$TRASH/want" <<-\EOF &&
	ok
	abi=1 head=0 version=0 start=0 epoch=0 handle=0 expect=0 follow
	wrote 2
	wrote 2
	abi=1 head=4 version=2 start=0 epoch=0 handle=0 expect=4 follow
	wrote 2
	ESPIPE
	abi=1 head=6 version=3 start=0 epoch=0 handle=0 expect=broken follow
	ESPIPE
	ok
	wrote 2
	ok
	abi=1 head=8 version=4 start=0 epoch=0 handle=0 expect=none
	wrote 2
	ok
	abi=1 head=10 version=5 start=0 epoch=0 handle=0 expect=none
	EOF
	test_cmp "$TRASH/want" "$TRASH/out" &&
	test "$(cat "$F")" = aabbccffgg
'

test_expect_success 'the C example adapter: two leaders, the first fenced' '
	: >"$MNT/k/leader" &&
	"$LEADER" "$MNT/k/leader" 20 >"$TRASH/out" &&
	cat "$TRASH/out" &&
	grep -q "A: fenced (ESTALE), stops" "$TRASH/out" &&
	test "$(stat -c %s "$MNT/k/leader")" = $((2 * 20 * 512)) &&
	test "$(nrs_xattr "$MNT/k/leader" user.nereus.epoch)" = 2 &&
	nrs_check_head "$S" "$MNT/k/leader"
'

test_expect_success 'epochs and bytes after a remount' '
	nrs_remount &&
	test "$(cat "$S")" = 0123456789abcdefghij &&
	test "$(nrs_xattr "$S" user.nereus.epoch)" = 6 &&
	test "$(nrs_xattr "$MNT/k/leader" user.nereus.epoch)" = 2 &&
	"$LEADER" "$MNT/k/leader" 3 >"$TRASH/out" &&
	test "$(nrs_xattr "$MNT/k/leader" user.nereus.epoch)" = 4
'

test_expect_success 'unmount' '
	nrs_umount
'

test_done
