# objlib.sh - helpers for the tests of materialization to an object store,
# any provider: sourced after lib.sh by objects.sh (the suite every provider
# runs) and by t0520-s3-outage.sh.

# Mount options that materialize soon and in small pieces: a stream is due
# once 64 KiB or 200 ms wait, an object holds at most 256 KiB, and a WAL
# segment 1 MiB (so that segments fill and get reclaimed in a short test).
# compact_size=0: no compaction (t0610 tests it), so the stored objects are
# exactly those the indexes name
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
	for k in $(cat "$TRASH/keys.all"); do
		test -s "$(obj_file "$k")" || { echo "missing object $k"; return 1; }
	done &&
	test "$(obj_files | wc -l)" = "$(wc -l <"$TRASH/keys.all")"
}

# The value of metric nereus_NAME in /.nereus/metrics.
metric () {
	sed -n "s/^nereus_$1 //p" "$MNT/.nereus/metrics"
}

wal_files () {
	find "$DATA/wal" -name '*.seg' | wc -l
}
