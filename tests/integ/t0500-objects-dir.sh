#!/bin/sh
test_description='materialization to the embedded object directory: publish, read back, reclaim, corruption, crashes'
. "${NRS_TESTLIB:-$(dirname "$0")/lib.sh}"

# The default store: DATA/objects, one file per key (objstore_dir.c).
OBJ_OPTS=
OBJ_STORE=dir
obj_file () {
	echo "$DATA/objects/$1"
}
obj_files () {
	find "$DATA/objects" -path "$DATA/objects/.tmp" -prune -o -type f -print 2>/dev/null
}

. "$(dirname "$0")/objects.sh"
test_done
