#!/bin/sh
test_description='set-id bits cleared by an unprivileged write or O_TRUNC, durably (core_append.c K1; pjdfstest chmod/12.t)'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"

command -v setpriv >/dev/null || nrs_error "setpriv missing (util-linux)"
[ "$(id -u)" = 0 ] || nrs_skip_all "needs root, to write as another user"
id nobody >/dev/null 2>&1 || nrs_error "no user nobody"

# The writer is nobody, who must reach the mount: allow_other, and a
# scratch directory others may enter (the data directory stays 0700).
chmod 0755 "$TRASH"
K=$MNT/k

# as_nobody CMD...: run a shell command line as nobody (no groups).
as_nobody () {
	setpriv --reuid="$(id -u nobody)" --regid="$(id -g nobody)" \
		--clear-groups sh -c "$1"
}

mode_is () {
	m=$(stat -c %a "$1") &&
	{ test "$m" = "$2" || { echo "$1: mode $m, not $2"; return 1; }; }
}

test_expect_success 'mount, with a stream directory everyone may write' '
	nrs_mount -o allow_other &&
	mkdir "$K" &&
	chmod 0777 "$K" &&
	for s in a b c d e t r; do : >"$K/$s" || return 1; done &&
	chmod 06777 "$K/a" "$K/e" "$K/r" &&
	chmod 06767 "$K/b" &&
	chmod 04777 "$K/c" &&
	chmod 02777 "$K/d" &&
	chmod 06777 "$K/t" &&
	mode_is "$K/a" 6777
'

test_expect_success 'root writes: the bits stay' '
	printf root >>"$K/r" &&
	: >"$K/e" &&
	mode_is "$K/r" 6777 &&
	mode_is "$K/e" 6777
'

test_expect_success 'nobody writes: S_ISUID goes, S_ISGID only with group-execute' '
	as_nobody "printf x >>$K/a" &&
	mode_is "$K/a" 777 &&
	as_nobody "printf x >>$K/b" &&
	mode_is "$K/b" 2767 &&
	as_nobody "printf x >>$K/c" &&
	mode_is "$K/c" 777 &&
	as_nobody "printf x >>$K/d" &&
	mode_is "$K/d" 777 &&
	test "$(cat "$K/a")" = x
'

test_expect_success 'nobody opens an empty stream with O_TRUNC: cleared too' '
	as_nobody ": >$K/e" &&
	mode_is "$K/e" 777 &&
	test "$(stat -c %s "$K/e")" = 0
'

test_expect_success 'a chmod after the clearing counts again' '
	chmod 06777 "$K/a" &&
	mode_is "$K/a" 6777 &&
	as_nobody "printf y >>$K/a" &&
	mode_is "$K/a" 777 &&
	test "$(cat "$K/a")" = xy
'

test_expect_success 'persisted: the cleared modes survive a remount' '
	nrs_remount -o allow_other &&
	mode_is "$K/a" 777 &&
	mode_is "$K/b" 2767 &&
	mode_is "$K/c" 777 &&
	mode_is "$K/e" 777 &&
	mode_is "$K/r" 6777
'

test_expect_success 'a stream loaded at mount: its first unprivileged write clears' '
	mode_is "$K/t" 6777 &&
	as_nobody "printf z >>$K/t" &&
	mode_is "$K/t" 777 &&
	printf w >>"$K/r" &&
	mode_is "$K/r" 6777 &&
	as_nobody "printf v >>$K/r" &&
	mode_is "$K/r" 777 &&
	test "$(cat "$K/r")" = rootwv
'

test_expect_success 'unmount' '
	nrs_umount
'

test_done
