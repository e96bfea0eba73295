#!/bin/sh
test_description='the namespace (DESIGN.md section 2) with exact errnos'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

deep=pulsar/tenant/ns/a/b/c/d/e/f/g/h/i/j

test_expect_success 'mount' '
	nrs_mount
'

test_expect_success 'mkdir -p of a deep path, and a stream at its bottom' '
	mkdir -p "$MNT/$deep" &&
	test -d "$MNT/$deep" &&
	printf deep >>"$MNT/$deep/s" &&
	test "$(cat "$MNT/$deep/s")" = deep &&
	find "$MNT/pulsar" | sed "s|^$MNT/||" >"$TRASH/find" &&
	test "$(wc -l <"$TRASH/find")" -eq 14 &&
	test "$(tail -n 1 "$TRASH/find")" = "$deep/s"
'

test_expect_success 'mkdir of an existing name: EEXIST; under a missing dir: ENOENT' '
	expect_errno EEXIST mkdir "$MNT/pulsar" &&
	expect_errno EEXIST mkdir "$MNT/$deep/s" &&
	expect_errno ENOENT mkdir "$MNT/nosuch/dir" &&
	expect_errno ENOENT append "$MNT/nosuch/s" x &&
	expect_errno ENOTDIR mkdir "$MNT/$deep/s/under-a-stream"
'

test_expect_success 'rmdir: empty ok, non-empty ENOTEMPTY, stream ENOTDIR' '
	mkdir -p "$MNT/r/empty" "$MNT/r/full/sub" &&
	: >>"$MNT/r/withstream" &&
	expect_errno ok rmdir "$MNT/r/empty" &&
	test ! -e "$MNT/r/empty" &&
	expect_errno ENOTEMPTY rmdir "$MNT/r/full" &&
	expect_errno ENOTDIR rmdir "$MNT/r/withstream" &&
	expect_errno ENOENT rmdir "$MNT/r/empty" &&
	expect_errno EISDIR unlink "$MNT/r/full" &&
	test -d "$MNT/r/full/sub"
'

test_expect_success 'readdir lists exactly what was created (300 entries)' '
	mkdir "$MNT/many" &&
	i=0 &&
	while [ $i -lt 300 ]; do
		if [ $((i % 3)) -eq 0 ]; then
			mkdir "$MNT/many/e$i" || break
		else
			: >>"$MNT/many/e$i" || break
		fi
		echo "e$i"
		i=$((i + 1))
	done | sort >"$TRASH/expect" &&
	ls -A "$MNT/many" | sort >"$TRASH/actual" &&
	test_cmp "$TRASH/expect" "$TRASH/actual" &&
	test "$(find "$MNT/many" -mindepth 1 -type d | wc -l)" -eq 100 &&
	test "$(find "$MNT/many" -mindepth 1 -type f | wc -l)" -eq 200 &&
	# readdir of "." and ".." too
	ls -a "$MNT/many" | grep -c "^\.\.\?\$" >"$TRASH/dots" &&
	test "$(cat "$TRASH/dots")" -eq 2
'

test_expect_success 'rename keeps the stream id and the bytes' '
	printf abc >>"$MNT/r/a" &&
	id=$(nrs_xattr "$MNT/r/a" user.nereus.id) &&
	test -n "$id" &&
	ino=$(stat -c %i "$MNT/r/a") &&
	mv "$MNT/r/a" "$MNT/r/b" &&
	test ! -e "$MNT/r/a" &&
	test "$(nrs_xattr "$MNT/r/b" user.nereus.id)" = "$id" &&
	test "$(stat -c %i "$MNT/r/b")" = "$ino" &&
	test "$(cat "$MNT/r/b")" = abc &&
	mv "$MNT/r/b" "$MNT/$deep/moved" &&
	test "$(nrs_xattr "$MNT/$deep/moved" user.nereus.id)" = "$id" &&
	test "$(cat "$MNT/$deep/moved")" = abc &&
	printf def >>"$MNT/$deep/moved" &&
	test "$(cat "$MNT/$deep/moved")" = abcdef
'

test_expect_success 'rename over a stream replaces it, keeping the source id' '
	printf src >>"$MNT/r/src" &&
	printf dst >>"$MNT/r/dst" &&
	sid=$(nrs_xattr "$MNT/r/src" user.nereus.id) &&
	did=$(nrs_xattr "$MNT/r/dst" user.nereus.id) &&
	test "$sid" != "$did" &&
	mv -f "$MNT/r/src" "$MNT/r/dst" &&
	test ! -e "$MNT/r/src" &&
	test "$(nrs_xattr "$MNT/r/dst" user.nereus.id)" = "$sid" &&
	test "$(cat "$MNT/r/dst")" = src
'

test_expect_success 'rename errors: noreplace EEXIST, dir over non-empty dir ENOTEMPTY, into itself EINVAL, stream over dir EISDIR, dir over stream ENOTDIR' '
	printf x >>"$MNT/r/x" &&
	printf y >>"$MNT/r/y" &&
	expect_errno EEXIST rename "$MNT/r/x" "$MNT/r/y" noreplace &&
	test "$(cat "$MNT/r/y")" = y &&
	mkdir -p "$MNT/r/d1" "$MNT/r/d2/child" &&
	expect_errno ENOTEMPTY rename "$MNT/r/d1" "$MNT/r/d2" &&
	expect_errno EINVAL rename "$MNT/r/d2" "$MNT/r/d2/child/d2" &&
	expect_errno EISDIR rename "$MNT/r/x" "$MNT/r/d1" &&
	expect_errno ENOTDIR rename "$MNT/r/d1" "$MNT/r/x" &&
	expect_errno ENOENT rename "$MNT/r/nosuch" "$MNT/r/z" &&
	expect_errno ok rename "$MNT/r/d1" "$MNT/r/d3" &&
	test -d "$MNT/r/d3" && test ! -e "$MNT/r/d1" &&
	expect_errno ok rename "$MNT/r/d3" "$MNT/r/d2/child/d3" &&
	test -d "$MNT/r/d2/child/d3"
'

test_expect_success 'renaming a directory keeps what is under it' '
	id=$(nrs_xattr "$MNT/$deep/s" user.nereus.id) &&
	mv "$MNT/pulsar/tenant" "$MNT/pulsar/tenant2" &&
	test "$(nrs_xattr "$MNT/pulsar/tenant2/${deep#pulsar/tenant/}/s" user.nereus.id)" = "$id" &&
	mv "$MNT/pulsar/tenant2" "$MNT/pulsar/tenant" &&
	test "$(cat "$MNT/$deep/s")" = deep
'

test_expect_success 'unlink with an open handle: the name goes at once, the handle still reads' '
	printf "still-here" >>"$MNT/r/doomed" &&
	old=$(nrs_xattr "$MNT/r/doomed" user.nereus.id) &&
	nrs-syscalls \
		open a "$MNT/r/doomed" rdonly -- \
		expect ok unlink "$MNT/r/doomed" -- \
		expect ENOENT stat "$MNT/r/doomed" -- \
		expect ok pread a 0 100 -- \
		expect ok fstat a >"$TRASH/out" &&
	cat "$TRASH/out" &&
	sed -n 4p "$TRASH/out" | grep "^ok 10 still-here\$" &&
	sed -n 5p "$TRASH/out" | grep " size=10 " &&
	! ls "$MNT/r" | grep doomed &&
	printf new >>"$MNT/r/doomed" &&
	new=$(nrs_xattr "$MNT/r/doomed" user.nereus.id) &&
	test "$new" != "$old" &&
	test "$(cat "$MNT/r/doomed")" = new
'

test_expect_success 'an unlinked stream with an open handle takes further appends or refuses them, never corrupting' '
	printf "12345" >>"$MNT/r/doomed2" &&
	nrs-syscalls \
		open a "$MNT/r/doomed2" wronly,append -- \
		open b "$MNT/r/doomed2" rdonly -- \
		expect ok unlink "$MNT/r/doomed2" -- \
		write a "678" -- \
		pread b 0 100 >"$TRASH/out" &&
	cat "$TRASH/out" &&
	case "$(sed -n 4p "$TRASH/out")" in
	"ok 3") sed -n 5p "$TRASH/out" | grep "^ok 8 12345678\$" ;;
	ok*) false ;;
	*) sed -n 5p "$TRASH/out" | grep "^ok 5 12345\$" ;;
	esac
'

test_expect_success 'chmod, chown, touch -d' '
	printf x >>"$MNT/r/attrs" &&
	mkdir "$MNT/r/attrdir" &&
	chmod 0640 "$MNT/r/attrs" &&
	chmod 0711 "$MNT/r/attrdir" &&
	chown 1234:5678 "$MNT/r/attrs" &&
	chown 4321:8765 "$MNT/r/attrdir" &&
	touch -m -d "2001-02-03 04:05:06.5 UTC" "$MNT/r/attrs" &&
	touch -a -d "2002-03-04 05:06:07 UTC" "$MNT/r/attrs" &&
	touch -m -d "2003-04-05 06:07:08 UTC" "$MNT/r/attrdir" &&
	stat -c "%a %u %g %Y %X" "$MNT/r/attrs" >"$TRASH/attrs-before" &&
	stat -c "%a %u %g %Y" "$MNT/r/attrdir" >>"$TRASH/attrs-before" &&
	cat "$TRASH/attrs-before" &&
	test "$(sed -n 1p "$TRASH/attrs-before")" = "640 1234 5678 981173106 1015218367" &&
	test "$(sed -n 2p "$TRASH/attrs-before")" = "711 4321 8765 1049522828" &&
	test "$(stat -c %.9Y "$MNT/r/attrs")" = 981173106.500000000 &&
	test "$(stat -c %F "$MNT/r/attrs")" = "regular file"
'

test_expect_success 'hard links, symlinks and device nodes: EPERM' '
	expect_errno EPERM link "$MNT/r/x" "$MNT/r/x-link" &&
	expect_errno EPERM symlink "$MNT/r/x" "$MNT/r/x-sym" &&
	expect_errno EPERM symlink "x" "$MNT/r/x-sym" &&
	expect_errno EPERM mknod "$MNT/r/fifo" fifo &&
	expect_errno EPERM mknod "$MNT/r/chr" chr &&
	expect_errno EPERM mknod "$MNT/r/sock" sock &&
	test_must_fail ln "$MNT/r/x" "$MNT/r/x-ln" 2>"$TRASH/err" &&
	grep "Operation not permitted" "$TRASH/err" &&
	test_must_fail ln -s x "$MNT/r/x-ln" 2>"$TRASH/err" &&
	grep "Operation not permitted" "$TRASH/err" &&
	test_must_fail mkfifo "$MNT/r/x-fifo" 2>"$TRASH/err" &&
	grep "Operation not permitted" "$TRASH/err" &&
	test -z "$(ls "$MNT/r" | grep -e -link -e -sym -e -ln -e fifo -e chr -e sock)"
'

test_expect_success 'names of 255 bytes work, 256 bytes: ENAMETOOLONG' '
	n255=$(printf "%0255d" 0 | tr 0 n) &&
	n256=${n255}x &&
	d255=$(printf "%0255d" 0 | tr 0 d) &&
	printf long >>"$MNT/r/$n255" &&
	test "$(cat "$MNT/r/$n255")" = long &&
	mkdir "$MNT/r/$d255" &&
	ls "$MNT/r" | grep -x "$n255" &&
	ls "$MNT/r" | grep -x "$d255" &&
	expect_errno ENAMETOOLONG append "$MNT/r/$n256" x &&
	expect_errno ENAMETOOLONG mkdir "$MNT/r/$n256" &&
	expect_errno ENAMETOOLONG stat "$MNT/r/$n256" &&
	expect_errno ENAMETOOLONG rename "$MNT/r/$n255" "$MNT/r/$n256" &&
	test "$(cat "$MNT/r/$n255")" = long &&
	printf "%s" "$n255" >"$TRASH/n255"
'

test_expect_success '.nereus cannot be written, removed, renamed or created in' '
	ro="EPERM|EACCES|EROFS" &&
	expect_errno "$ro" write "$MNT/.nereus/metrics" x &&
	expect_errno "$ro" append "$MNT/.nereus/status" x &&
	expect_errno "$ro" open a "$MNT/.nereus/metrics" rdwr &&
	expect_errno "$ro" truncate "$MNT/.nereus/metrics" 0 &&
	expect_errno "$ro" unlink "$MNT/.nereus/metrics" &&
	expect_errno "$ro|ENOTEMPTY|EBUSY" rmdir "$MNT/.nereus" &&
	expect_errno "$ro|EBUSY" rename "$MNT/.nereus" "$MNT/not-nereus" &&
	expect_errno "$ro" rename "$MNT/.nereus/status" "$MNT/status" &&
	expect_errno "$ro" rename "$MNT/r/x" "$MNT/.nereus/x" &&
	expect_errno "$ro" mkdir "$MNT/.nereus/sub" &&
	expect_errno "$ro" append "$MNT/.nereus/new" x &&
	expect_errno "$ro|EEXIST" mkdir "$MNT/.nereus" &&
	expect_errno "$ro" setxattr "$MNT/.nereus/metrics" user.x 1 &&
	expect_errno "$ro" setxattr "$MNT/.nereus" user.x 1 &&
	test_must_fail rm -rf "$MNT/.nereus" &&
	test -r "$MNT/.nereus/metrics" &&
	test "$(cat "$MNT/.nereus/status" | wc -c)" -gt 0
'

test_expect_success 'remember inode numbers, ids and attributes' '
	for p in pulsar "$deep" "$deep/s" "$deep/moved" r r/dst r/attrs r/attrdir many many/e3 many/e4 "r/$n255"; do
		echo "$p $(stat -c "%i %F" "$MNT/$p")"
	done >"$TRASH/inodes-before" &&
	for p in "$deep/s" "$deep/moved" r/dst r/attrs "r/$n255"; do
		echo "$p $(nrs_xattr "$MNT/$p" user.nereus.id)"
	done >"$TRASH/ids-before" &&
	test "$(sort -u -k2,2 "$TRASH/inodes-before" | wc -l)" -eq 12 &&
	test "$(awk "{print \$2}" "$TRASH/ids-before" | sort -u | wc -l)" -eq 5 &&
	find "$MNT" -path "$MNT/.nereus" -prune -o -print | sort >"$TRASH/tree-before"
'

test_expect_success 'after a remount: same tree, inode numbers, ids, modes, owners, times' '
	nrs_remount &&
	for p in pulsar "$deep" "$deep/s" "$deep/moved" r r/dst r/attrs r/attrdir many many/e3 many/e4 "r/$n255"; do
		echo "$p $(stat -c "%i %F" "$MNT/$p")"
	done >"$TRASH/inodes-after" &&
	test_cmp "$TRASH/inodes-before" "$TRASH/inodes-after" &&
	for p in "$deep/s" "$deep/moved" r/dst r/attrs "r/$n255"; do
		echo "$p $(nrs_xattr "$MNT/$p" user.nereus.id)"
	done >"$TRASH/ids-after" &&
	test_cmp "$TRASH/ids-before" "$TRASH/ids-after" &&
	stat -c "%a %u %g %Y %X" "$MNT/r/attrs" >"$TRASH/attrs-after" &&
	stat -c "%a %u %g %Y" "$MNT/r/attrdir" >>"$TRASH/attrs-after" &&
	test_cmp "$TRASH/attrs-before" "$TRASH/attrs-after" &&
	test "$(stat -c %.9Y "$MNT/r/attrs")" = 981173106.500000000 &&
	find "$MNT" -path "$MNT/.nereus" -prune -o -print | sort >"$TRASH/tree-after" &&
	test_cmp "$TRASH/tree-before" "$TRASH/tree-after" &&
	test "$(cat "$MNT/$deep/moved")" = abcdef &&
	test "$(cat "$MNT/r/dst")" = src &&
	test ! -e "$MNT/r/src" &&
	test ! -e "$MNT/r/empty"
'

test_expect_success 'ids are never reused: a new stream after remount gets a new id' '
	: >>"$MNT/r/fresh" &&
	id=$(nrs_xattr "$MNT/r/fresh" user.nereus.id) &&
	! grep " $id\$" "$TRASH/ids-before" &&
	test "$id" != "$old" && test "$id" != "$new" && test "$id" != "$did"
'

test_expect_success 'unmount' '
	nrs_umount
'

test_done
