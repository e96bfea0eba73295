#!/bin/sh
test_description='malformed input gets the documented errno; nothing acknowledged changes (issue 3, bad input)'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

# The errnos are those of man/nereusfs.8 (SEMANTICS, EXTENDED ATTRIBUTES).
# Where the kernel answers before the daemon sees the request (xattr sizes,
# offsets whose end overflows loff_t), the step says so.

A=$MNT/acked		# written by nrs-appender before everything else
X=$MNT/x/s		# the stream whose xattrs get bad values
nl='
'
n255=$(printf "%0255d" 0 | tr 0 n)
n256=${n255}n
deep=$(i=0; while [ $i -lt 200 ]; do printf "d%d/" $i; i=$((i + 1)); done)
deep=${deep%/}
big=9223372036854775807	# 2^63 - 1

# Every user.nereus.* value of FILE, for before/after comparisons, but the
# ones materialization moves in the background (materialized, wal_bytes,
# index): bad input must not change those either, but they change by
# themselves.
dump () {
	getfattr --absolute-names -d -m '^user\.nereus\.' -e hex -- "$1" |
		grep -v -E '^user\.nereus\.(materialized|wal_bytes|index)='
}

test_expect_success 'mount; an acknowledged stream written before any bad input' '
	nrs_mount &&
	nrs-appender -t 4 -n 200 -s 33-4096 -S 330 -a "$TRASH/ack" "$A" &&
	test "$(wc -l <"$TRASH/ack")" = 800 &&
	nrs_verify_records -c -u 0 -a "$TRASH/ack" "$A" &&
	cp "$A" "$TRASH/acked.copy"
'

test_expect_success 'names of 255 bytes work: stream, directory, rename' '
	mkdir "$MNT/n" &&
	printf long >>"$MNT/n/$n255" &&
	test "$(cat "$MNT/n/$n255")" = long &&
	mkdir "$MNT/n/d" && mkdir "$MNT/n/d/$n255" &&
	printf s >>"$MNT/n/d/$n255/s" &&
	mv "$MNT/n/$n255" "$MNT/n/d/$n255/$n255" &&
	test "$(cat "$MNT/n/d/$n255/$n255")" = long &&
	test "$(ls "$MNT/n/d/$n255" | sort | tr "\\n" " ")" = "$n255 s "
'

test_expect_success 'names of 256 bytes: ENAMETOOLONG for create, mkdir, rename, lookup' '
	expect_errno ENAMETOOLONG append "$MNT/n/$n256" x &&
	expect_errno ENAMETOOLONG open a "$MNT/n/$n256" wronly,creat &&
	expect_errno ENAMETOOLONG mkdir "$MNT/n/$n256" &&
	expect_errno ENAMETOOLONG rename "$MNT/n/d/$n255/s" "$MNT/n/$n256" &&
	expect_errno ENAMETOOLONG stat "$MNT/n/$n256" &&
	expect_errno ENAMETOOLONG unlink "$MNT/n/$n256" &&
	expect_errno ENAMETOOLONG setxattr "$MNT/n/$n256" user.a b &&
	test "$(cat "$MNT/n/d/$n255/s")" = s &&
	test "$(ls -A "$MNT/n" | tr "\\n" " ")" = "d "
'

test_expect_success 'a path 200 directories deep: mkdir -p, a stream at the bottom' '
	mkdir -p "$MNT/deep/$deep" &&
	printf bottom >>"$MNT/deep/$deep/s" &&
	printf +more >>"$MNT/deep/$deep/s" &&
	test "$(cat "$MNT/deep/$deep/s")" = bottom+more &&
	nrs_check_head "$MNT/deep/$deep/s" &&
	test "$(find "$MNT/deep" -type d | wc -l)" = 201 &&
	test "$(find "$MNT/deep" -type f)" = "$MNT/deep/$deep/s"
'

# Names as bytes: a newline, invalid UTF-8 (a lone continuation byte, a
# truncated sequence, 0xff/0xfe, an overlong "/"), and all three mixed.
odd_names () {
	python3 - "$1" "$2" <<-\EOF
	import os, sys
	d = os.fsencode(sys.argv[1])
	names = [b"a\nb", b"\n", b"trailing\n", b"\x80", b"caf\xc3", b"\xff\xfe",
	         b"\xc0\xaf", b"x\n\xffy\xe2\x82"]
	if sys.argv[2] == "create":
	    for i, n in enumerate(names):
	        p = os.path.join(d, n)
	        if i % 2:
	            os.mkdir(p)
	            p = os.path.join(p, n)
	        with open(p, "ab") as f:
	            f.write(b"content of " + n)
	got = sorted(os.listdir(d))
	if got != sorted(names):
	    sys.exit("readdir: got %r, want %r" % (got, sorted(names)))
	for i, n in enumerate(names):
	    p = os.path.join(d, n)
	    if i % 2:
	        if os.listdir(p) != [n]:
	            sys.exit("readdir of %r: %r" % (n, os.listdir(p)))
	        p = os.path.join(p, n)
	    with open(p, "rb") as f:
	        b = f.read()
	    if b != b"content of " + n:
	        sys.exit("%r holds %r" % (n, b))
	print("%d odd names listed back byte-exact" % len(names))
	EOF
}

test_expect_success 'names with newlines and invalid UTF-8 work and readdir gives the exact bytes' '
	mkdir "$MNT/odd" &&
	odd_names "$MNT/odd" create &&
	test "$(ls -b "$MNT/odd" | wc -l)" = 8 &&
	ls -b "$MNT/odd" | grep -Fx "a\\nb" &&
	ls -b "$MNT/odd" | grep -Fx "\\377\\376"
'

test_expect_success 'numeric user.nereus.* values: empty, non-numeric, signed, 2^64, spaces, newline: EINVAL, unchanged' '
	mkdir "$MNT/x" &&
	printf 0123456789 >>"$X" && printf abcdef >>"$X" &&
	setfattr -n user.nereus.trim -v 4 "$X" &&
	setfattr -n user.nereus.epoch -v 3 "$X" &&
	# retention is enforced: values far above what this stream holds
	setfattr -n user.nereus.retention.bytes -v 100000000000 "$X" &&
	setfattr -n user.nereus.retention.ms -v 3600000 "$X" &&
	setfattr -n user.nereus.retention.ms -v 3600000 "$MNT/x" &&
	dx=$(dump "$X") && dd=$(dump "$MNT/x") &&
	for n in epoch trim retention.bytes retention.ms; do
		# a value that is valid for each: trim within [4, 16], epoch above 3
		# (-1 on retention.* is the Kafka forever, taken as 0: t0620)
		good=10 && neg=-1 &&
		case $n in retention.*) neg=-2 ;; esac &&
		for bad in "" abc 1x x1 $neg -$good +$good 18446744073709551616 \
			36893488147419103232 99999999999999999999999 " $good" "$good " \
			"$good$nl" "$nl$good" "	$good" "1 0" "0x10" "1.5" "1e3"; do
			expect_errno EINVAL setxattr "$X" user.nereus.$n "$bad" >/dev/null ||
				{ echo "stream: $n=\"$bad\" not EINVAL"; return 1; }
			expect_errno EINVAL setxattr "$X" user.nereus.$n "$bad" replace >/dev/null ||
				{ echo "stream: $n=\"$bad\" (replace) not EINVAL"; return 1; }
			case $n in trim|epoch) continue ;; esac
			expect_errno EINVAL setxattr "$MNT/x" user.nereus.$n "$bad" >/dev/null ||
				{ echo "directory: $n=\"$bad\" not EINVAL"; return 1; }
		done || return 1
	done &&
	test "$(dump "$X")" = "$dx" &&
	test "$(dump "$MNT/x")" = "$dd" &&
	test "$(nrs_xattr "$X" user.nereus.start)" = 4 &&
	test "$(nrs_xattr "$X" user.nereus.epoch)" = 3 &&
	test "$(nrs_xattr "$X" user.nereus.retention.ms)" = 3600000 &&
	expect_errno ok setxattr "$X" user.nereus.trim 10 &&
	expect_errno ok setxattr "$X" user.nereus.epoch 10 &&
	test "$(nrs_xattr "$X" user.nereus.start)" = 10 &&
	test "$(nrs_xattr "$X" user.nereus.epoch)" = 10 &&
	cmp "$TRASH/acked.copy" "$A"
'

test_expect_success 'user.* values: exactly 65536 bytes work; 65537 is E2BIG (kernel) and keeps the old value' '
	expect_errno ok setxattrn "$X" user.big 65536 &&
	test "$(nrs_xattr "$X" user.big | wc -c)" = 65536 &&
	expect_errno E2BIG setxattrn "$X" user.big 65537 &&
	expect_errno E2BIG setxattrn "$X" user.big2 1048576 &&
	test "$(nrs_xattr "$X" user.big | wc -c)" = 65536 &&
	expect_errno ENODATA getxattr "$X" user.big2 &&
	expect_errno ok setxattrn "$MNT/x" user.big 65536 &&
	test "$(nrs_xattr "$MNT/x" user.big | wc -c)" = 65536
'

test_expect_success 'user.* names: 255 bytes work; 256 is ERANGE (kernel)' '
	name=user.$(printf "%0250d" 0) &&
	expect_errno ok setxattr "$X" "$name" v &&
	test "$(nrs_xattr "$X" "$name")" = v &&
	expect_errno ERANGE setxattr "$X" "${name}0" v &&
	expect_errno ERANGE getxattr "$X" "${name}0" &&
	expect_errno ok removexattr "$X" "$name"
'

test_expect_success 'an unknown user.nereus. name: EINVAL on set, ENODATA on get, not listed' '
	d=$(dump "$X") &&
	for n in user.nereus.bogus user.nereus. user.nereus.Head user.nereus.head.x \
		user.nereus.trim2; do
		expect_errno EINVAL setxattr "$X" "$n" 1 &&
		expect_errno EINVAL setxattr "$X" "$n" 1 create &&
		expect_errno EINVAL setxattr "$MNT/x" "$n" 1 &&
		expect_errno ENODATA getxattr "$X" "$n" &&
		expect_errno ENODATA getxattr "$MNT/x" "$n" || return 1
	done &&
	! nrs-syscalls listxattr "$X" | tr " " "\\n" | grep -E "bogus|Head|trim" &&
	test "$(dump "$X")" = "$d"
'

# nereusfs(8): "Setting a read-only name, or removing any user.nereus. name,
# is EPERM" -- any, so unknown ones too.
test_expect_success 'removing an unknown user.nereus. name: EPERM (as for every user.nereus. name)' '
	for n in user.nereus.bogus user.nereus.trim2; do
		expect_errno EPERM removexattr "$X" "$n" &&
		expect_errno EPERM removexattr "$MNT/x" "$n" || return 1
	done
'

test_expect_success 'names outside user.: absent on get, EOPNOTSUPP on set, not listed' '
	for n in trusted.x security.x trusted.nereus.epoch; do
		for f in "$X" "$MNT/x"; do
			expect_errno ENODATA getxattr "$f" "$n" &&
			expect_errno EOPNOTSUPP setxattr "$f" "$n" v &&
			expect_errno EOPNOTSUPP setxattr "$f" "$n" v create &&
			expect_errno ENODATA getxattr "$f" "$n" || return 1
		done
	done &&
	! nrs-syscalls listxattr "$X" | tr " " "\\n" | grep -E "^(trusted|security)\\."
'

test_expect_success 'writes of 0 bytes return 0 and change nothing' '
	d=$(dump "$X") &&
	nrs-syscalls \
		expect ok open a "$X" wronly,append -- \
		expect ok open c "$X" wronly -- \
		expect ok write a "" -- \
		expect ok writen a 0 -- \
		expect ok write c "" -- \
		expect ok pwrite c 0 "" -- \
		expect ok pwrite c 16 "" -- \
		expect ok pwrite c $big "" >"$TRASH/out" &&
	sed "s/^/| /" "$TRASH/out" &&
	test "$(grep -c "^ok 0\$" "$TRASH/out")" = 6 &&
	expect_errno ok append "$MNT/x/zero" "" &&
	test "$(stat -c %s "$MNT/x/zero")" = 0 &&
	test "$(nrs_xattr "$MNT/x/zero" user.nereus.version)" = 0 &&
	test "$(dump "$X")" = "$d"
'

test_expect_success 'a write over the max write size (3 MiB): all of it, in order, as several appends' '
	v=$(nrs_xattr "$X" user.nereus.version) &&
	expect_errno ok writen "$X" 3145728 z &&
	test "$(stat -c %s "$X")" = $((16 + 3145728)) &&
	nrs_check_head "$X" &&
	v2=$(nrs_xattr "$X" user.nereus.version) &&
	test $((v2 - v)) -ge 3 &&
	test "$(tail -c 3145728 "$X" | tr -d z | wc -c)" = 0
'

# An offset + length past 2^63 - 1 is refused by the kernel (EINVAL from
# rw_verify_area: the end overflows loff_t) before the daemon sees it, so the
# reads end at most at 2^63 - 1.
test_expect_success 'reads at offsets near 2^63: 0 bytes, no error (read-only and read-write handles)' '
	nrs-syscalls \
		expect ok open r "$X" rdonly -- \
		expect ok open w "$X" rdwr -- \
		expect ok pread r 4611686018427387904 100 -- \
		expect ok pread r 9223372036854767616 4096 -- \
		expect ok pread r 9223372036854775806 1 -- \
		expect ok pread w 4611686018427387904 100 -- \
		expect ok pread w 9223372036854767616 4096 -- \
		expect ok pread w 9223372036854775806 1 -- \
		expect ok pread r 10 6 >"$TRASH/out" &&
	sed "s/^/| /" "$TRASH/out" &&
	test "$(grep -c "^ok 0\$" "$TRASH/out")" = 6 &&
	tail -n 1 "$TRASH/out" | grep -x "ok 6 abcdef" &&
	expect_errno ok pread "$A" $big 0
'

# A 1-byte pwrite at 2^63 - 1 ends at 2^63: the kernel refuses it with
# EINVAL (rw_verify_area) and no WRITE reaches the daemon (seen with -d), so
# the daemon's own answer is checked at 2^63 - 2, the farthest offset it can
# be asked to write at.
test_expect_success 'pwrite at 2^63-2 (and other far offsets) without O_APPEND: ESPIPE, nothing written' '
	d=$(dump "$X") &&
	nrs-syscalls \
		expect ok open c "$X" wronly -- \
		expect "ESPIPE|EINVAL" pwrite c $big x -- \
		expect ESPIPE pwrite c 9223372036854775806 x -- \
		expect ESPIPE pwrite c 4611686018427387904 xyz -- \
		expect ESPIPE pwrite c 0 x &&
	test "$(dump "$X")" = "$d"
'

# One kind of racer on the storm streams, for at most $2 seconds and $3
# iterations; errors of single operations are expected (the name comes and
# goes) and ignored, only the daemon and the streams are checked.
racer () {
	local end=$(($(date +%s) + $2)) i=0 h
	while [ $i -lt "$3" ] && [ "$(date +%s)" -lt $end ]; do
		case $1 in
		append)	nrs-syscalls append "$MNT/storm/s" "<0123456789abcdef>" -- \
				append "$MNT/storm/t" "<0123456789abcdef>" ;;
		trim)	for f in s t; do
				h=$(nrs_xattr "$MNT/storm/$f" user.nereus.head 2>/dev/null) &&
				nrs-syscalls setxattr "$MNT/storm/$f" user.nereus.trim "$h"
			done ;;
		unlink)	nrs-syscalls unlink "$MNT/storm/s" -- sleep 20 -- unlink "$MNT/storm/t" ;;
		rename)	nrs-syscalls rename "$MNT/storm/s" "$MNT/storm/t" -- \
				rename "$MNT/storm/t" "$MNT/storm/s" noreplace -- \
				rename "$MNT/storm/s" "$MNT/storm/t" exchange ;;
		esac >/dev/null 2>&1
		i=$((i + 1))
	done
	echo "$1: $i iterations"
}

test_expect_success 'concurrent trim/append/unlink/rename on one stream for ~5 s; the daemon stays up' '
	mkdir "$MNT/storm" &&
	printf "<0123456789abcdef>" >>"$MNT/storm/s" &&
	pids= &&
	for k in append append trim trim unlink rename rename; do
		nrs_bg racer $k 5 4000 >>"$TRASH/storm.out" 2>&1 &&
		pids="$pids $NRS_LAST_BG" || return 1
	done &&
	nrs_bg nrs-appender -t 2 -d 5 -s 33-2048 -S 331 -w 10 -a "$TRASH/ack2" \
		"$MNT/storm/acked2" >"$TRASH/appender2.out" 2>&1 &&
	app=$NRS_LAST_BG &&
	for p in $pids; do
		nrs_wait $p 30 || { echo "racer $p: status $?"; return 1; }
	done &&
	nrs_wait $app 30 &&
	cat "$TRASH/storm.out" "$TRASH/appender2.out" &&
	kill -0 $NRS_PID
'

# Each remaining storm stream holds, in [start, head), whole copies of the
# one record every append wrote (trims go to a head, so to a boundary).
check_storm () {
	local f s h
	for f in "$MNT"/storm/s "$MNT"/storm/t; do
		[ -e "$f" ] || continue
		nrs_check_head "$f" || return 1
		s=$(nrs_xattr "$f" user.nereus.start) && h=$(stat -c %s "$f") || return 1
		echo "$f: start $s head $h version $(nrs_xattr "$f" user.nereus.version)"
		python3 - "$f" "$s" "$h" <<-\EOF || return 1
		import sys
		f, s, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
		rec = b"<0123456789abcdef>"
		with open(f, "rb", buffering=0) as fp:
		    fp.seek(s)
		    b = b""
		    while True:
		        c = fp.read(1 << 20)
		        if not c:
		            break
		        b += c
		if len(b) != h - s or b != rec * (len(b) // len(rec)):
		    sys.exit("%s: %d bytes in [%d, %d), not whole records" % (f, len(b), s, h))
		EOF
	done
}

test_expect_success 'after the storm: every named stream passes the head check, acked streams verify' '
	ls -A "$MNT/storm" &&
	check_storm &&
	nrs_verify_records -c -u 0 -a "$TRASH/ack2" "$MNT/storm/acked2" &&
	nrs_verify_records -c -u 0 -a "$TRASH/ack" "$A" &&
	cmp "$TRASH/acked.copy" "$A"
'

test_expect_success 'the daemon is alive; clean unmount exits 0; after a remount everything is still there' '
	kill -0 $NRS_PID &&
	test "$(stat -c %s "$X")" = $((16 + 3145728)) &&
	nrs_remount &&
	nrs_verify_records -c -u 0 -a "$TRASH/ack" "$A" &&
	cmp "$TRASH/acked.copy" "$A" &&
	nrs_verify_records -c -u 0 -a "$TRASH/ack2" "$MNT/storm/acked2" &&
	check_storm &&
	test "$(cat "$MNT/deep/$deep/s")" = bottom+more &&
	test "$(find "$MNT/deep" -type d | wc -l)" = 201 &&
	test "$(cat "$MNT/n/d/$n255/$n255")" = long &&
	odd_names "$MNT/odd" check &&
	test "$(nrs_xattr "$X" user.big | wc -c)" = 65536 &&
	test "$(nrs_xattr "$X" user.nereus.epoch)" = 10 &&
	test "$(nrs_xattr "$X" user.nereus.start)" = 10 &&
	test "$(nrs_xattr "$MNT/x" user.nereus.retention.ms)" = 3600000
'

test_expect_success 'unmount' '
	nrs_umount
'

test_done
