#!/usr/bin/env bash
# tests/bench/nscost.sh: what a create costs under an object-wal directory
# (core_metalog.c NS1), beside N streams, for two nereusfs binaries side
# by side in one run: BEFORE (e.g. a build of main, where each such change
# waited for a checkpoint of the whole metadata) and AFTER (this tree: a
# META record of the object WAL).
#
#	NSCOST_BEFORE=path/to/nereusfs NSCOST_AFTER=build/rel/nereusfs \
#		tests/bench/nscost.sh
#
# For each N (NSCOST_STREAMS) and each binary in turn, on the embedded
# store (DATA/objects) with the object WAL's defaults: a fresh data
# directory; N empty streams made in a local-wal directory; a directory
# set to object-wal; then NSCOST_CREATES creates one after another in it,
# each timed from open(O_CREAT) to close, and as many in the local-wal
# directory.  Prints the median and the mean per create for both
# directories and both binaries, and AFTER's object-wal median against
# BEFORE's.  A create is one process's system calls through FUSE: what
# an adapter making topics one at a time sees.  It prints and never fails
# over a figure.
#
# Environment: NSCOST_BEFORE, NSCOST_AFTER (required), BENCH_TMPDIR
#   (default /var/tmp), NSCOST_OPTS (more mount options for both, e.g.
#   object_wal_linger_ms=200: the cost profile's linger, which a create
#   waits out unless its WAL object is sealed at once, wal_object.c
#   OW15), NSCOST_STREAMS (default "600 10000"),
#   NSCOST_CREATES (default 50), NSCOST_ROUNDS (default 2: the binaries
#   alternate, BEFORE AFTER BEFORE AFTER, so a load change hits both).
set -uo pipefail

BEFORE=${NSCOST_BEFORE:?NSCOST_BEFORE: the nereusfs to compare against}
AFTER=${NSCOST_AFTER:?NSCOST_AFTER: the nereusfs of this tree}
BENCH_TMPDIR=${BENCH_TMPDIR:-/var/tmp}
STREAMS=${NSCOST_STREAMS:-600 10000}
CREATES=${NSCOST_CREATES:-50}
ROUNDS=${NSCOST_ROUNDS:-2}
OPTS=${NSCOST_OPTS:+,$NSCOST_OPTS}
here=$(cd "$(dirname "$0")" && pwd)
export LC_ALL=C

note() { echo "nscost: $*" >&2; }
. "$here/lib.sh"	# unmount, mount_fs

work=$(mktemp -d "$BENCH_TMPDIR/nrs-nscost.XXXXXX") || exit 1
pid=
cleanup() { unmount "$work/mnt" "$pid"; rm -rf "$work"; }
trap cleanup EXIT
mkdir "$work/mnt"

# make N | time DIR COUNT: python, so a create is its own system calls
cat >"$work/t.py" <<'EOF'
import os, sys, time
if sys.argv[1] == "make":
    d, n = sys.argv[2], int(sys.argv[3])
    for i in range(n):
        os.close(os.open("%s/b%06d" % (d, i), os.O_CREAT | os.O_WRONLY, 0o644))
else:
    d, n = sys.argv[2], int(sys.argv[3])
    t = []
    for i in range(n):
        t0 = time.perf_counter()
        os.close(os.open("%s/c%06d" % (d, i), os.O_CREAT | os.O_WRONLY, 0o644))
        t.append(time.perf_counter() - t0)
    t.sort()
    print("%.2f %.2f" % (t[len(t) // 2] * 1e3, sum(t) / len(t) * 1e3))
EOF

# one binary, N streams: "ow_median ow_mean local_median local_mean"
measure() { # NEREUSFS N
	local bin=$1 n=$2 ow loc
	rm -rf "$work/data"
	mkdir -m 700 "$work/data"
	if ! mount_fs pid "$work/mnt" "$work/log" "$bin" -f \
			-o "data=$work/data$OPTS" "$work/mnt"; then
		note "$bin did not mount"; sed 's/^/  | /' "$work/log" >&2
		return 1
	fi
	mkdir "$work/mnt/bulk" "$work/mnt/local" "$work/mnt/ow" &&
	python3 "$work/t.py" make "$work/mnt/bulk" "$n" &&
	setfattr -n user.nereus.profile -v object-wal "$work/mnt/ow" &&
	ow=$(python3 "$work/t.py" time "$work/mnt/ow" "$CREATES") &&
	loc=$(python3 "$work/t.py" time "$work/mnt/local" "$CREATES") ||
		{ note "creates failed"; unmount "$work/mnt" "$pid"; pid=; return 1; }
	unmount "$work/mnt" "$pid"
	pid=
	echo "$ow $loc"
}

[ -n "$OPTS" ] && echo "mount options: data=DATA$OPTS"
printf '%-7s %-6s %5s  %-22s %-22s\n' streams binary round \
	"object-wal ms (med mean)" "local-wal ms (med mean)"
for n in $STREAMS; do
	b_sum=0 a_sum=0
	for r in $(seq "$ROUNDS"); do
		for which in before after; do
			bin=$BEFORE
			[ $which = after ] && bin=$AFTER
			res=$(measure "$bin" "$n") || continue
			set -- $res
			printf '%-7s %-6s %5s  %8s %8s      %8s %8s\n' "$n" $which "$r" \
				"$1" "$2" "$3" "$4"
			if [ $which = before ]; then
				b_sum=$(awk -v a="$b_sum" -v b="$1" 'BEGIN { print a + b }')
			else
				a_sum=$(awk -v a="$a_sum" -v b="$1" 'BEGIN { print a + b }')
			fi
		done
	done
	awk -v n="$n" -v b="$b_sum" -v a="$a_sum" 'BEGIN { if (a > 0)
		printf "%-7s object-wal create, before / after (medians): %.1fx\n", n, b / a }' 
done
uptime
