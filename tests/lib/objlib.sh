# objlib.sh - helpers for the tests on an object store, any provider:
# sourced after lib.sh by the suites every provider runs (objects.sh,
# lifecycle.sh, compaction.sh) and by t0520-s3-outage.sh.
#
# A suite runs once per provider: its runner script sources lib.sh, then
# the provider's file (dirstore.sh for the embedded store, s3.sh with
# nrs_s3_start for S3), then the suite.  The provider's file sets:
#   OBJ_OPTS        mount options naming the provider, each after a comma
#                   (appended to the suite's own -o options; "" for the
#                   default)
#   OBJ_STORE       the provider's name in /.nereus/status ("dir", "s3")
#   obj_files       prints the path of every stored object's data file, one
#                   per line (the test's own view of the store: a listing
#                   is never something nereusfs itself relies on)
#   obj_file KEY    prints the data file holding object KEY (its bytes as
#                   stored: byte for byte on S3, after a header on dir)
# and may set (the defaults below do nothing: the files are the store):
#   obj_sync        make obj_file's files show the store as it is now
#                   (moto.sh: a copy of the bucket)
#   obj_write_back KEY  store obj_file KEY's bytes, changed by a test,
#                   under KEY again

# Mount options that materialize soon and in small pieces: a stream is due
# once 64 KiB or 200 ms wait, an object holds at most 256 KiB, and a WAL
# segment 1 MiB (so that segments fill and get reclaimed in a short test).
# compact_size=0: no compaction (compaction.sh tests it), so the stored
# objects are exactly those the indexes name
FAST="materialize_bytes=65536,materialize_age_ms=200,object_size=262144,wal_segment_size=1048576,compact_size=0"

# wait_materialized [-t SECONDS] FILE...: wait until every FILE is
# materialized up to its head, SECONDS (default 20) at most in all.
wait_materialized () {
	local f n=0 h m limit=20
	if [ "$1" = -t ]; then
		limit=$2
		shift 2
	fi
	for f in "$@"; do
		while :; do
			h=$(nrs_xattr "$f" user.nereus.head) &&
			m=$(nrs_xattr "$f" user.nereus.materialized) || return 1
			[ "$h" = "$m" ] && break
			if [ $n -ge $((limit * 10)) ]; then
				echo "$f: materialized $m, head $h after $limit s"
				nrs_xattr "$f" user.nereus.index | tail -3
				return 1
			fi
			n=$((n + 1))
			sleep 0.1
		done
	done
}

command -v obj_sync >/dev/null 2>&1 || obj_sync () { :; }
command -v obj_write_back >/dev/null 2>&1 || obj_write_back () { :; }

# The keys the index of FILE serves from objects.
index_keys () {
	nrs_xattr "$1" user.nereus.index | sed -n 's/^[0-9]* [0-9]* [0-9]* obj://p'
}

# objects_match FILE...: the store holds an object for every key the
# indexes of the FILEs name, and no other (obj_file and obj_files come from
# the provider's test script).
objects_match () {
	local f k
	for f in "$@"; do
		index_keys "$f" || return 1
	done | sort >"$TRASH/keys.all" &&
	obj_sync &&
	for k in $(cat "$TRASH/keys.all"); do
		test -s "$(obj_file "$k")" || { echo "missing object $k"; return 1; }
	done &&
	test "$(obj_files | wc -l)" = "$(wc -l <"$TRASH/keys.all")"
}

# The value of metric nereus_NAME in /.nereus/metrics.
metric () {
	sed -n "s/^nereus_$1 //p" "$MNT/.nereus/metrics"
}

# obj_bytes: the bytes the store's objects take (the sum of the sizes of
# their data files: the data directory's objects, with their headers, on
# the embedded store; the bucket's on S3).  An object GC deletes meanwhile
# counts as gone.
obj_bytes () {
	obj_files | tr '\n' '\0' | xargs -0 -r stat -c %s -- 2>/dev/null |
		awk '{ s += $1 } END { print s + 0 }'
}

wal_files () {
	find "$DATA/wal" -name '*.seg' | wc -l
}
