# s3.sh - a real S3 server (s3rver, tests/fixtures/s3/s3rver.sh) for the
# integration tests that mount on S3: sourced after lib.sh by
# t0510-objects-s3.sh, t0520-s3-outage.sh, t0605-lifecycle-s3.sh and
# t0615-compaction-s3.sh.  With nrs_s3_start it is the provider of the
# suites every provider runs (objects.sh, lifecycle.sh, compaction.sh), as
# dirstore.sh is for the embedded store.
#
#   nrs_s3_start    start s3rver on the fresh directory $S3DIR ($TRASH/s3),
#                   its stop registered with nrs_at_exit (so it goes however
#                   the script ends; s3rver.sh's guard covers a SIGKILL);
#                   sets NRS_S3_URL, NRS_S3_PID, and exports the keys as
#                   AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY for the daemon;
#                   sets the suites' OBJ_OPTS (",s3=$NRS_S3_URL") and
#                   OBJ_STORE (s3).
#                   An s3rver that cannot start is an error (99), never a
#                   skip: the harness installs it (contrib/install-deps.sh).
#   nrs_s3_stop     stop it (the store goes away: connections are refused)
#   nrs_s3_restart  start it again on the same port and data directory:
#                   the store comes back with every object it held
#   obj_file KEY    the file in s3rver's directory holding object KEY's bytes
#   obj_files       every stored segment object's data file, one per line
#                   (not the metadata checkpoints, ckpt/)
#
# s3rver 3.7.1 (lib/stores/filesystem.js) keeps bucket BUCKET in
# $S3DIR/data/BUCKET, an object KEY "a/b/c" as files in the subdirectory
# a/b (made on demand, removed with the last object in it):
#   c._S3rver_object                the object's bytes, byte for byte
#   c._S3rver_object.md5            their MD5 in hex, its ETag
#   c._S3rver_metadata.json         its metadata (x-amz-meta-sha256 ...)
# and a bucket's own state in dot-names such as ._S3rver_uploads (multipart
# uploads; nereusfs makes none).  Only *._S3rver_object files are objects.
# s3rver reads the .md5 file rather than hashing the object again, so a test
# that alters an object file behind its back changes the bytes GET returns
# but not the ETag; nereusfs proves objects by its own SHA-256 and block
# CRCs, never by an ETag.
#
# Environment: NRS_S3RVER_SH (make check sets it; default: the script in
# this source tree) and NRS_S3RVER (s3rver.sh says).

NRS_S3RVER_SH=${NRS_S3RVER_SH:-$nrs_top/tests/fixtures/s3/s3rver.sh}
S3DIR=$TRASH/s3
NRS_S3_BUCKET=${NRS_S3_BUCKET:-nereus}
export NRS_S3_BUCKET
command -v node >/dev/null 2>&1 ||
	nrs_error "node is not in PATH (contrib/install-deps.sh installs it)"

# Run s3rver.sh start|restart and take its assignments.
nrs_s3_run () {
	local out
	out=$(NRS_S3RVER_OWNER=$$ sh "$NRS_S3RVER_SH" "$1" "$S3DIR") || return 1
	eval "$out"
	AWS_ACCESS_KEY_ID=$NRS_S3_ACCESS_KEY
	AWS_SECRET_ACCESS_KEY=$NRS_S3_SECRET_KEY
	export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
}

nrs_s3_start () {
	nrs_at_exit "sh '$NRS_S3RVER_SH' stop '$S3DIR'"
	nrs_s3_run start || nrs_error "could not start s3rver (see above)"
	echo "# s3rver at $NRS_S3_URL (pid $NRS_S3_PID), data in $S3DIR/data"
	OBJ_OPTS=",s3=$NRS_S3_URL"
	OBJ_STORE=s3
}

nrs_s3_stop () {
	echo "=== $this_test: s3rver stopped" >>"$LOG"
	sh "$NRS_S3RVER_SH" stop "$S3DIR"
}

nrs_s3_restart () {
	local url=$NRS_S3_URL
	nrs_s3_run restart || return 1
	echo "=== $this_test: s3rver restarted" >>"$LOG"
	if [ "$NRS_S3_URL" != "$url" ]; then
		echo "nrs_s3_restart: s3rver came back at $NRS_S3_URL, not $url"
		return 1
	fi
}

obj_file () {
	local dir base
	case $1 in
	*/*)	dir=${1%/*}/ base=${1##*/} ;;
	*)	dir= base=$1 ;;
	esac
	echo "$S3DIR/data/$NRS_S3_BUCKET/$dir$base._S3rver_object"
}

obj_files () {
	# not the owner record (owner/owner.c) nor the checkpoints
	find "$S3DIR/data/$NRS_S3_BUCKET" -path "$S3DIR/data/$NRS_S3_BUCKET/ckpt" \
		-prune -o -type f -name '*._S3rver_object' \
		! -path "$S3DIR/data/$NRS_S3_BUCKET/owner._S3rver_object" -print 2>/dev/null
}
