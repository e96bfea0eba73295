# moto.sh - an S3 server that checks V4 signatures (moto_server,
# tests/fixtures/s3/moto.sh) for the integration tests that mount on it: sourced
# after lib.sh by t0530-t0549 and t0607.  With nrs_moto_start it is the
# provider of the suites every provider runs (objects.sh, lifecycle.sh),
# as s3.sh is for s3rver.
#
#   nrs_moto_start  start moto_server with authentication enforced (an IAM
#                   user, its key and the bucket made by the fixture; every
#                   request nereusfs makes must be signed V4, right), its
#                   stop registered with nrs_at_exit (the fixture's guard
#                   covers a SIGKILL); sets NRS_S3_URL, NRS_S3_PID,
#                   NRS_S3_ACCESS_KEY, NRS_S3_SECRET_KEY, exports the keys
#                   as AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY for the
#                   daemon; sets OBJ_OPTS (",s3=$NRS_S3_URL") and OBJ_STORE.
#                   A server that cannot start is an error (99), never a
#                   skip.
#   moto_ls [ARGS]  tests/fixtures/s3/moto_ls.py: the bucket seen by boto3
#
# moto keeps its objects in memory: the test's view of them (objlib.sh's
# provider hooks) is a copy, VIEW=$TRASH/moto-view, that obj_sync refreshes
# (every object as VIEW/KEY); obj_files refreshes it first, obj_file KEY
# names VIEW/KEY as of the last refresh, and obj_write_back KEY stores
# VIEW/KEY's bytes under KEY again (with the object's metadata), so the
# suites can damage an object as on the other stores.

NRS_MOTO_SH=${NRS_MOTO_SH:-$nrs_top/tests/fixtures/s3/moto.sh}
# lifecycle.sh's grace period test: a refresh of VIEW (a Python start and
# a listing) can take a second or two on a loaded machine
OBJ_G2_GRACE_MS=8000
MOTO_DIR=$TRASH/moto
VIEW=$TRASH/moto-view
NRS_S3_BUCKET=${NRS_S3_BUCKET:-nereus}
export NRS_S3_BUCKET

moto_ls () {
	NRS_S3_URL=$NRS_S3_URL NRS_S3_ACCESS_KEY=$NRS_S3_ACCESS_KEY \
	NRS_S3_SECRET_KEY=$NRS_S3_SECRET_KEY \
		python3 "$nrs_top/tests/fixtures/s3/moto_ls.py" "$@"
}

nrs_moto_start () {
	local out
	nrs_at_exit "sh '$NRS_MOTO_SH' stop '$MOTO_DIR'"
	out=$(NRS_S3RVER_OWNER=$$ sh "$NRS_MOTO_SH" start "$MOTO_DIR") ||
		nrs_error "could not start moto_server (see above)"
	eval "$out"
	AWS_ACCESS_KEY_ID=$NRS_S3_ACCESS_KEY
	AWS_SECRET_ACCESS_KEY=$NRS_S3_SECRET_KEY
	export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
	echo "# moto_server at $NRS_S3_URL (pid $NRS_S3_PID)"
	OBJ_OPTS=",s3=$NRS_S3_URL"
	OBJ_STORE=s3
}

obj_sync () {
	moto_ls sync "$VIEW"
}

obj_file () {
	echo "$VIEW/$1"
}

obj_files () {
	# not the owner record (owner/owner.c) nor the checkpoints: no
	# stream's objects
	obj_sync && find "$VIEW" -path "$VIEW/ckpt" -prune -o -type f \
		! -path "$VIEW/owner" -print
}

obj_write_back () {
	moto_ls put "$1" "$VIEW/$1"
}
