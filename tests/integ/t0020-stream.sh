#!/bin/sh
test_description='a stream file (DESIGN.md section 3), row by row'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

version () {
	nrs_xattr "$1" user.nereus.version
}

size () {
	stat -c %s -- "$1"
}

# mtime with nanoseconds as one integer
mtime_ns () {
	stat -c %.9Y -- "$1" | tr -d .
}

S=$MNT/s

test_expect_success 'mount, make a stream' '
	nrs_mount &&
	printf hello >>"$S" &&
	test "$(cat "$S")" = hello &&
	test "$(version "$S")" = 1 &&
	test "$(stat -c "%F %h" "$S")" = "regular file 1"
'

test_expect_success 'O_APPEND write appends at the head whatever the file offset' '
	nrs-syscalls \
		open a "$S" wronly,append -- \
		lseek a 0 set -- \
		expect ok write a "-w1" -- \
		lseek a 2 set -- \
		expect ok write a "-w2" -- \
		expect ok pwrite a 0 "-p0" -- \
		expect ok pwrite a 100000 "-p1" >"$TRASH/out" 2>&1 ||
	{ cat "$TRASH/out"; false; } &&
	test "$(cat "$S")" = "hello-w1-w2-p0-p1" &&
	test "$(version "$S")" = 5 &&
	nrs_check_head "$S"
'

test_expect_success 'pwrite at the head is an append; anywhere else ESPIPE and nothing written' '
	h=$(size "$S") && v=$(version "$S") && m=$(mtime_ns "$S") &&
	nrs-syscalls \
		open a "$S" wronly -- \
		expect ESPIPE pwrite a 0 X -- \
		expect ESPIPE pwrite a $((h - 1)) X -- \
		expect ESPIPE pwrite a $((h + 1)) X -- \
		expect ESPIPE pwrite a 1000000000 X -- \
		expect ok pwrite a "$h" "=head" &&
	test "$(cat "$S")" = "hello-w1-w2-p0-p1=head" &&
	test "$(version "$S")" = $((v + 1)) &&
	test "$(size "$S")" = $((h + 5)) &&
	test "$(mtime_ns "$S")" -gt "$m" &&
	nrs_check_head "$S"
'

test_expect_success 'write() without O_APPEND is conditional on the file offset' '
	h=$(size "$S") && v=$(version "$S") &&
	nrs-syscalls \
		open a "$S" wronly -- \
		expect ESPIPE write a X -- \
		lseek a 0 end -- \
		expect ok write a "+a" -- \
		expect ok write a "+b" >"$TRASH/out" 2>&1 ||
	{ cat "$TRASH/out"; false; } &&
	test "$(cat "$S")" = "hello-w1-w2-p0-p1=head+a+b" &&
	test "$(version "$S")" = $((v + 2))
'

test_expect_success 'two handles at the same head: the first append wins, the second gets ESPIPE' '
	h=$(size "$S") && v=$(version "$S") &&
	nrs-syscalls \
		open a "$S" wronly -- \
		open b "$S" wronly -- \
		lseek a 0 end -- \
		lseek b 0 end -- \
		expect ok write a "<A>" -- \
		expect ESPIPE write b "<B>" -- \
		lseek b 0 end -- \
		expect ok write b "<B>" &&
	test "$(tail -c 6 "$S")" = "<A><B>" &&
	test "$(version "$S")" = $((v + 2))
'

test_expect_success 'a read-write handle reads to the head and goes on writing there' '
	h=$(size "$S") &&
	nrs-syscalls \
		open a "$S" rdwr -- \
		read a 1000000 -- \
		expect ok write a "<rw>" >"$TRASH/out" &&
	sed -n 2p "$TRASH/out" | grep "^ok $h hello" &&
	test "$(tail -c 4 "$S")" = "<rw>"
'

test_expect_success 'cp, cat > new and dd into new streams' '
	head -c 3000000 /dev/urandom >"$TRASH/blob" &&
	cp "$TRASH/blob" "$MNT/by-cp" &&
	cat "$TRASH/blob" >"$MNT/by-cat" &&
	dd if="$TRASH/blob" of="$MNT/by-dd" bs=65536 2>/dev/null &&
	dd if="$TRASH/blob" of="$MNT/by-dd1m" bs=1M 2>/dev/null &&
	for f in by-cp by-cat by-dd by-dd1m; do
		cmp "$TRASH/blob" "$MNT/$f" && nrs_check_head "$MNT/$f" || return 1
	done &&
	test "$(version "$MNT/by-dd1m")" -eq 3 &&
	cp "$MNT/by-cp" "$TRASH/back" &&
	cmp "$TRASH/blob" "$TRASH/back"
'

test_expect_success '>> appends, dd oflag=append appends' '
	printf "12345" >"$MNT/app" &&
	printf "678" >>"$MNT/app" &&
	printf "9" | dd of="$MNT/app" oflag=append conv=notrunc 2>/dev/null &&
	test "$(cat "$MNT/app")" = 123456789
'

test_expect_success '> onto a non-empty stream (O_TRUNC) is EPERM and changes nothing' '
	v=$(version "$MNT/app") &&
	test_must_fail sh -c "echo x >\"\$1\"" sh "$MNT/app" 2>"$TRASH/err" &&
	grep "Operation not permitted" "$TRASH/err" &&
	test_must_fail cp "$TRASH/blob" "$MNT/app" &&
	expect_errno EPERM open a "$MNT/app" wronly,trunc &&
	expect_errno EPERM open a "$MNT/app" rdwr,trunc &&
	expect_errno EPERM open a "$MNT/app" wronly,append,trunc &&
	test "$(cat "$MNT/app")" = 123456789 &&
	test "$(version "$MNT/app")" = "$v"
'

test_expect_success 'O_TRUNC on an empty stream is a no-op' '
	: >"$MNT/empty" &&
	expect_errno ok open a "$MNT/empty" wronly,trunc &&
	: >"$MNT/empty" &&
	test "$(size "$MNT/empty")" = 0 &&
	test "$(version "$MNT/empty")" = 0
'

test_expect_success 'read: whole, short at the head, 0 at and past it, 0 near 2^63' '
	h=$(size "$MNT/app") &&
	nrs-syscalls \
		expect ok pread "$MNT/app" 0 1000 -- \
		expect ok pread "$MNT/app" 4 3 -- \
		expect ok pread "$MNT/app" 7 1000 -- \
		expect ok pread "$MNT/app" "$h" 10 -- \
		expect ok pread "$MNT/app" $((h + 4096)) 10 -- \
		expect ok pread "$MNT/app" 9223372036854767616 4096 -- \
		expect ok pread "$MNT/app" 9223372036854775806 1 -- \
		open a "$MNT/app" rdonly -- \
		lseek a 5000000 set -- \
		expect ok read a 10 >"$TRASH/out" &&
	cat >"$TRASH/expect" <<-EOF &&
	ok 9 123456789
	ok 3 567
	ok 2 89
	ok 0
	ok 0
	ok 0
	ok 0
	ok
	ok 5000000
	ok 0
	EOF
	test_cmp "$TRASH/expect" "$TRASH/out"
'

test_expect_success 'truncate to the current size is a no-op; any other size EPERM' '
	h=$(size "$MNT/app") && v=$(version "$MNT/app") && m=$(mtime_ns "$MNT/app") &&
	truncate -s "$h" "$MNT/app" &&
	expect_errno ok truncate "$MNT/app" "$h" &&
	expect_errno ok ftruncate "$MNT/app" "$h" &&
	expect_errno EPERM truncate "$MNT/app" 0 &&
	expect_errno EPERM truncate "$MNT/app" $((h - 1)) &&
	expect_errno EPERM truncate "$MNT/app" $((h + 1)) &&
	expect_errno EPERM ftruncate "$MNT/app" 0 &&
	expect_errno EPERM ftruncate "$MNT/app" $((h + 4096)) &&
	test_must_fail truncate -s 0 "$MNT/app" 2>"$TRASH/err" &&
	grep "Operation not permitted" "$TRASH/err" &&
	test "$(cat "$MNT/app")" = 123456789 &&
	test "$(version "$MNT/app")" = "$v" &&
	test "$(mtime_ns "$MNT/app")" = "$m"
'

test_expect_success 'fsync and fdatasync return 0' '
	nrs-syscalls \
		open a "$MNT/app" wronly,append -- \
		expect ok write a "0" -- \
		expect ok fsync a -- \
		expect ok fdatasync a -- \
		open b "$MNT/app" rdonly -- \
		expect ok fsync b -- \
		expect ok fdatasync b &&
	test "$(cat "$MNT/app")" = 1234567890
'

test_expect_success 'fallocate: EOPNOTSUPP' '
	expect_errno EOPNOTSUPP fallocate "$MNT/app" 0 4096 &&
	expect_errno EOPNOTSUPP fallocate "$MNT/app" 10 4096 keep &&
	expect_errno EOPNOTSUPP fallocate "$MNT/app" 0 4 punch &&
	test "$(cat "$MNT/app")" = 1234567890
'

test_expect_success 'writable shared mmap: ENODEV' '
	expect_errno ENODEV mmap "$MNT/app" 0 10 shared-rw &&
	test "$(cat "$MNT/app")" = 1234567890
'

test_expect_success 'read-only mmap, private: the bytes of the stream' '
	nrs-syscalls expect ok mmap "$MNT/app" 0 10 private-ro >"$TRASH/out" &&
	echo "ok 10 1234567890" >"$TRASH/expect" &&
	test_cmp "$TRASH/expect" "$TRASH/out" &&
	nrs-syscalls expect ok mmap "$MNT/by-cp" 1048576 4096 private-ro >"$TRASH/out" &&
	nrs-syscalls pread "$MNT/by-cp" 1048576 4096 >"$TRASH/expect" &&
	test_cmp "$TRASH/expect" "$TRASH/out"
'

test_expect_success 'read-only mmap, shared, on a read-only handle' '
	nrs-syscalls expect ok mmap "$MNT/app" 0 10 shared-ro >"$TRASH/out" &&
	echo "ok 10 1234567890" >"$TRASH/expect" &&
	test_cmp "$TRASH/expect" "$TRASH/out"
'

test_expect_success 'stat: st_size == head, st_blocks counts the bytes held' '
	nrs_check_head "$S" "$MNT/app" "$MNT/by-cp" "$MNT/empty" &&
	test "$(stat -c %b "$MNT/by-cp")" -gt 0
'

test_expect_success 'mtime moves on each commit, not on a refused append' '
	m0=$(mtime_ns "$MNT/app") &&
	sleep 0.05 &&
	printf a >>"$MNT/app" &&
	m1=$(mtime_ns "$MNT/app") &&
	test "$m1" -gt "$m0" &&
	sleep 0.05 &&
	expect_errno ESPIPE pwrite "$MNT/app" 0 X &&
	test "$(mtime_ns "$MNT/app")" = "$m1" &&
	printf b >>"$MNT/app" &&
	test "$(mtime_ns "$MNT/app")" -gt "$m1"
'

test_expect_success 'a handle sees appends made through another (size and bytes)' '
	h=$(size "$MNT/app") &&
	nrs-syscalls \
		open b "$MNT/app" rdonly -- \
		expect ok read b 100 -- \
		expect ok fstat b -- \
		open a "$MNT/app" wronly,append -- \
		expect ok write a "XYZ" -- \
		expect ok fstat b -- \
		expect ok read b 100 -- \
		expect ok pread b 0 100 -- \
		expect ok write a "PQ" -- \
		expect ok pread b $((h + 3)) 100 -- \
		expect ok fstat b >"$TRASH/out" &&
	cat "$TRASH/out" &&
	sed -n 3p "$TRASH/out" | grep " size=$h " &&
	sed -n 6p "$TRASH/out" | grep " size=$((h + 3)) " &&
	sed -n 7p "$TRASH/out" | grep "^ok 3 XYZ\$" &&
	sed -n 8p "$TRASH/out" | grep "^ok $((h + 3)) 1234567890abXYZ\$" &&
	sed -n 10p "$TRASH/out" | grep "^ok 2 PQ\$" &&
	sed -n 11p "$TRASH/out" | grep " size=$((h + 5)) " &&
	test "$(cat "$MNT/app")" = 1234567890abXYZPQ
'

test_expect_success 'a cached page at the old head does not hide later appends' '
	# Read the last page through the page cache, append, read again:
	# the bytes past the old head must be the new ones, not zeros.
	i=0 &&
	while [ $i -lt 20 ]; do
		nrs-syscalls \
			open b "$MNT/cache" rdonly -- \
			pread b 0 1000000 -- \
			append "$MNT/cache" "<$i>" -- \
			pread b 0 1000000 || return 1
		i=$((i + 1))
	done >"$TRASH/out" 2>&1 &&
	expected="" && i=0 &&
	while [ $i -lt 20 ]; do expected="$expected<$i>"; i=$((i + 1)); done &&
	test "$(cat "$MNT/cache")" = "$expected" &&
	! grep "\\\\x00" "$TRASH/out" &&
	tail -n 1 "$TRASH/out" | grep "^ok ${#expected} $expected\$"
'

test_expect_success 'one write() of exactly 1 MiB is one append (page-aligned buffer)' '
	head -c 1048576 /dev/urandom >"$TRASH/1m" &&
	printf "x" >>"$MNT/big" &&
	v=$(version "$MNT/big") &&
	nrs-syscalls expect ok writefile "$MNT/big" "$TRASH/1m" 0 >"$TRASH/out" &&
	test "$(cat "$TRASH/out")" = "ok 1048576" &&
	test "$(version "$MNT/big")" = $((v + 1)) &&
	test "$(size "$MNT/big")" = 1048577 &&
	tail -c 1048576 "$MNT/big" | cmp - "$TRASH/1m" &&
	nrs-syscalls expect ok open a "$MNT/big1m" wronly,creat -- \
		expect ok writefile a "$TRASH/1m" 0 &&
	test "$(version "$MNT/big1m")" = 1 &&
	cmp "$MNT/big1m" "$TRASH/1m" &&
	nrs_check_head "$MNT/big" "$MNT/big1m"
'

test_expect_success 'one write() of 1 MiB - 4 KiB from any buffer is one append' '
	head -c 1044480 "$TRASH/1m" >"$TRASH/1020k" &&
	for skew in 16 1 4095; do
		v=$(version "$MNT/big") &&
		h=$(size "$MNT/big") &&
		nrs-syscalls expect ok writefile "$MNT/big" "$TRASH/1020k" $skew >"$TRASH/out" &&
		test "$(cat "$TRASH/out")" = "ok 1044480" &&
		test "$(version "$MNT/big")" = $((v + 1)) &&
		test "$(size "$MNT/big")" = $((h + 1044480)) &&
		tail -c 1044480 "$MNT/big" | cmp - "$TRASH/1020k" || {
			echo "skew $skew: version $v -> $(version "$MNT/big")"
			return 1
		}
	done
'

# The documented limit (nereusfs(8)): the kernel pins at most 256 pages for
# one request, so an unaligned buffer of exactly 1 MiB reaches the daemon as
# two requests, i.e. two appends.  The bytes still land whole and in order.
test_expect_success 'one write() of 1 MiB from an unaligned buffer: bytes whole and in order' '
	for skew in 16 4095; do
		v=$(version "$MNT/big") &&
		h=$(size "$MNT/big") &&
		nrs-syscalls expect ok writefile "$MNT/big" "$TRASH/1m" $skew >"$TRASH/out" &&
		test "$(cat "$TRASH/out")" = "ok 1048576" &&
		nv=$(version "$MNT/big") &&
		test "$nv" -ge $((v + 1)) && test "$nv" -le $((v + 2)) &&
		test "$(size "$MNT/big")" = $((h + 1048576)) &&
		tail -c 1048576 "$MNT/big" | cmp - "$TRASH/1m" || return 1
	done
'

test_expect_success 'trim at a page boundary: reads below start ENODATA, from start the bytes' '
	head -c 12288 /dev/urandom >"$TRASH/3pages" &&
	cp "$TRASH/3pages" "$MNT/tp" &&
	setfattr -n user.nereus.trim -v 4096 "$MNT/tp" &&
	expect_errno ENODATA pread "$MNT/tp" 0 4096 &&
	expect_errno ENODATA pread "$MNT/tp" 4095 2 &&
	tail -c +4097 "$TRASH/3pages" >"$TRASH/2pages" &&
	dd if="$MNT/tp" bs=4096 skip=1 2>/dev/null | cmp - "$TRASH/2pages"
'

test_expect_success 'trim: start moves up, reads below start are ENODATA' '
	printf "01234" >>"$MNT/t" &&
	printf "56789" >>"$MNT/t" &&
	test "$(nrs_xattr "$MNT/t" user.nereus.start)" = 0 &&
	setfattr -n user.nereus.trim -v 5 "$MNT/t" &&
	test "$(nrs_xattr "$MNT/t" user.nereus.start)" = 5 &&
	test "$(size "$MNT/t")" = 10 &&
	nrs_check_head "$MNT/t" &&
	nrs-syscalls \
		expect ENODATA pread "$MNT/t" 0 5 -- \
		expect ENODATA pread "$MNT/t" 0 100 -- \
		expect ENODATA pread "$MNT/t" 4 1 -- \
		expect ok pread "$MNT/t" 5 100 -- \
		expect ok pread "$MNT/t" 7 2 >"$TRASH/out" &&
	sed -n 4p "$TRASH/out" | grep "^ok 5 56789\$" &&
	sed -n 5p "$TRASH/out" | grep "^ok 2 78\$" &&
	test_must_fail cat "$MNT/t" 2>"$TRASH/err" &&
	grep "No data available" "$TRASH/err" &&
	test "$(dd if="$MNT/t" bs=1 skip=5 2>/dev/null)" = 56789 &&
	test_must_fail tail -c 5 "$MNT/t" &&
	printf "ab" >>"$MNT/t" &&
	test "$(nrs-syscalls pread "$MNT/t" 5 100)" = "ok 7 56789ab"
'

# nereusfs(8): a read-only handle opened before a trim to an offset that is
# not a multiple of 4096 reads through the page cache, which reads whole
# pages: below start, within start's page, it reads zeros -- never the
# trimmed bytes -- and ENODATA below that page.
test_expect_success 'trim also hides bytes a read-only handle had cached' '
	printf "abcdefgh" >>"$MNT/t2" &&
	nrs-syscalls \
		open b "$MNT/t2" rdonly -- \
		expect ok pread b 0 100 -- \
		expect ok setxattr "$MNT/t2" user.nereus.trim 4 -- \
		pread b 0 4 -- \
		expect ok pread b 4 100 >"$TRASH/out" &&
	sed -n 4p "$TRASH/out" >"$TRASH/below" &&
	! grep abcd "$TRASH/below" &&
	sed -n 5p "$TRASH/out" | grep "^ok 4 efgh\$"
'

test_expect_success 'after a remount: bytes, versions, start and mtime kept' '
	for f in "$S" "$MNT/app" "$MNT/big" "$MNT/t"; do
		echo "$f $(size "$f") $(version "$f") $(mtime_ns "$f") $(nrs_xattr "$f" user.nereus.start)"
	done >"$TRASH/before" &&
	nrs_remount &&
	for f in "$S" "$MNT/app" "$MNT/big" "$MNT/t"; do
		echo "$f $(size "$f") $(version "$f") $(mtime_ns "$f") $(nrs_xattr "$f" user.nereus.start)"
	done >"$TRASH/after" &&
	test_cmp "$TRASH/before" "$TRASH/after" &&
	test "$(cat "$MNT/app")" = 1234567890abXYZPQ &&
	test "$(cat "$S")" = "hello-w1-w2-p0-p1=head+a+b<A><B><rw>" &&
	cmp "$TRASH/blob" "$MNT/by-dd"
'

test_expect_success 'after a remount: reads below start are still ENODATA, above it the bytes' '
	expect_errno ENODATA pread "$MNT/t" 0 1 &&
	test "$(nrs-syscalls pread "$MNT/t" 5 100)" = "ok 7 56789ab"
'

test_expect_success 'unmount' '
	nrs_umount
'

test_done
