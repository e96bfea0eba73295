# dirstore.sh - the embedded object store (objstore_dir.c) as the provider
# of the suites every provider runs (objects.sh, lifecycle.sh,
# compaction.sh): sourced after lib.sh by t0500, t0600 and t0610.  It sets
# the hooks those suites take, as s3.sh does for S3:
#   OBJ_OPTS        "" (the default store)
#   OBJ_STORE       dir
#   obj_file KEY    $DATA/objects/KEY: one file per key, the object's
#                   bytes after a 64-byte header (objstore_dir.c)
#   obj_files       every such file, one per line; DATA/objects/.tmp (an
#                   upload not yet renamed into place) holds no object, and
#                   the metadata checkpoints (ckpt/) are not segment objects

OBJ_OPTS=
OBJ_STORE=dir

obj_file () {
	echo "$DATA/objects/$1"
}

obj_files () {
	# dot-names (.tmp, .lock) are the store's own; "owner" is the owner
	# record (owner/owner.c), ckpt/ the checkpoints: no stream's objects
	find "$DATA/objects" \( -name '.*' -o -path "$DATA/objects/ckpt" \) -prune -o \
		-type f ! -path "$DATA/objects/owner" -print 2>/dev/null
}
