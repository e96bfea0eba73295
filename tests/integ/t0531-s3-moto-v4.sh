#!/bin/sh
test_description='S3 signature V4 against moto_server: what lands in the bucket (boto3), a wrong secret or key refused at mount, V2 refused and logged in time, virtual-hosted style, STS session tokens, errors by class in the metrics'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/moto.sh"
. "$nrs_lib/objlib.sh"

nrs_moto_start
S3=",s3=$NRS_S3_URL"

# The materializer's put, refused: logged (the owner record's probe fails
# first, and counts in the metrics, at mount).
put_unavailable_logged () {
	nrs_log_since_mount | grep "put s/.*: .*(unavailable, 4 attempts)"
}

metric_ge_class () { # CLASS N
	[ "$(sed -n "s/^nereus_object_store_errors_total{class=\"$1\"} //p" "$MNT/.nereus/metrics")" -ge "$2" ]
}

test_expect_success 'V4: objects land in the bucket with their length and SHA-256 (boto3)' '
	nrs_mount -o "$FAST$S3" &&
	head -c 900000 /dev/urandom >"$TRASH/blob" &&
	cp "$TRASH/blob" "$MNT/b" &&
	wait_materialized "$MNT/b" &&
	cmp "$TRASH/blob" "$MNT/b" &&
	index_keys "$MNT/b" | sort >"$TRASH/keys" &&
	test "$(wc -l <"$TRASH/keys")" -ge 4 &&
	moto_ls | grep -v "^owner " >"$TRASH/ls" &&
	cat "$TRASH/ls" &&
	cut -d" " -f1 "$TRASH/ls" | sort | cmp - "$TRASH/keys" &&
	moto_ls sync "$TRASH/v" &&
	while read -r k len sha; do
		test "$(stat -c %s "$TRASH/v/$k")" = "$len" &&
		test "$(sha256sum <"$TRASH/v/$k" | cut -d" " -f1)" = "$sha" || return 1
	done <"$TRASH/ls" &&
	grep "\"store\": \"s3\"" "$MNT/.nereus/status" &&
	nrs_umount &&
	nrs_mount -o "$FAST$S3" &&
	cmp "$TRASH/blob" "$MNT/b" &&
	nrs_umount
'

test_expect_success 'a wrong secret: the mount is refused, with one line that says what to fix' '
	AWS_SECRET_ACCESS_KEY=wrong-secret test_must_fail nrs_mount -o "$FAST$S3" &&
	nrs_log_since_mount | grep "S3 $NRS_S3_URL: refused (HTTP 403 SignatureDoesNotMatch, signature): the secret key is wrong" &&
	test "$(nrs_log_since_mount | grep -c "refused")" = 1 &&
	! nrs_log_since_mount | grep -F "wrong-secret"
'

test_expect_success 'an unknown access key: refused, naming AWS_ACCESS_KEY_ID' '
	AWS_ACCESS_KEY_ID=AKIANOSUCHKEY0000000 test_must_fail nrs_mount -o "$FAST$S3" &&
	nrs_log_since_mount | grep "refused (HTTP 403 InvalidAccessKeyId, access_key): .*AWS_ACCESS_KEY_ID"
'

test_expect_success 'a missing bucket: refused' '
	test_must_fail nrs_mount -o "$FAST,s3=${NRS_S3_URL%/*}/no-such-bucket" &&
	nrs_log_since_mount | grep "refused (HTTP 404 NoSuchBucket, no_bucket): there is no such bucket"
'

test_expect_success 'the store not answering at mount is a warning; appends go on; errors counted by class' '
	port=$(python3 -c "import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])") &&
	nrs_mount -o "$FAST,s3=http://127.0.0.1:$port/nereus" &&
	nrs_log_since_mount | grep "did not answer the probe (unavailable" &&
	head -c 100000 /dev/urandom >"$TRASH/w" &&
	cp "$TRASH/w" "$MNT/w" &&
	cmp "$TRASH/w" "$MNT/w" &&
	nrs_wait_for 20 metric_ge_class unavailable 1 &&
	test "$(metric object_store_retries_total)" -ge 3 &&
	nrs_wait_for 20 put_unavailable_logged &&
	nrs_umount
'

# moto answers a V2-signed request with a 500 (libs3 then reports an XML
# parse failure of its body): nothing is stored, every failure is logged,
# well within the deadline per operation.
test_expect_success 's3_signature=v2 against a V4-only server: nothing stored, logged in time' '
	moto_ls | grep -v "^owner " | sort >"$TRASH/before" &&
	nrs_mount -o "$FAST,s3_signature=v2$S3" &&
	head -c 300000 /dev/urandom >"$MNT/v2" &&
	n=0 &&
	until nrs_log_since_mount | grep "s3 $NRS_S3_URL: put s/[0-9a-fg/-]*: [A-Za-z]"; do
		[ $n -lt 200 ] || return 1
		sleep 0.1; n=$((n + 1))
	done &&
	echo "# a V2 put failed, logged, after $((n / 10)) s" &&
	test "$(nrs_xattr "$MNT/v2" user.nereus.materialized)" = 0 &&
	test "$(stat -c %s "$MNT/v2")" = 300000 &&
	metric_ge_class other 1 &&
	nrs_umount &&
	moto_ls | grep -v "^owner " | sort | cmp - "$TRASH/before"
'

test_expect_success 'virtual-hosted style: BUCKET.localhost, the same objects' '
	vurl=$(echo "$NRS_S3_URL" | sed "s|//127\.0\.0\.1:|//localhost:|") &&
	nrs_mount -o "$FAST,s3_style=virtual,s3=$vurl" &&
	head -c 500000 /dev/urandom >"$TRASH/vblob" &&
	cp "$TRASH/vblob" "$MNT/vh" &&
	wait_materialized "$MNT/vh" &&
	nrs_umount &&
	nrs_mount -o "$FAST,s3_style=virtual,s3=$vurl" &&
	cmp "$TRASH/vblob" "$MNT/vh" &&
	cmp "$TRASH/blob" "$MNT/b" &&
	index_keys "$MNT/vh" >"$TRASH/vkeys" &&
	moto_ls >"$TRASH/ls" &&
	for k in $(cat "$TRASH/vkeys"); do
		grep -q "^$k " "$TRASH/ls" || return 1
	done &&
	nrs_umount
'

# Temporary credentials from moto's STS (assume-role): the session token
# goes as x-amz-security-token; without it moto refuses the key.
test_expect_success 'STS credentials: with their session token they work' '
	eval "$(NRS_S3_URL=$NRS_S3_URL NRS_S3_ACCESS_KEY=$NRS_S3_ACCESS_KEY NRS_S3_SECRET_KEY=$NRS_S3_SECRET_KEY python3 "$nrs_top/tests/fixtures/s3/moto_sts.py")" &&
	case $NRS_STS_ACCESS_KEY in ASIA*) ;; *) false ;; esac &&
	AWS_ACCESS_KEY_ID=$NRS_STS_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$NRS_STS_SECRET_KEY \
	AWS_SESSION_TOKEN=$NRS_STS_TOKEN nrs_mount -o "$FAST$S3" &&
	head -c 300000 /dev/urandom >"$TRASH/sts" &&
	cp "$TRASH/sts" "$MNT/sts" &&
	wait_materialized "$MNT/sts" &&
	index_keys "$MNT/sts" >"$TRASH/stskeys" &&
	test -s "$TRASH/stskeys" &&
	nrs_umount &&
	moto_ls >"$TRASH/ls" &&
	for k in $(cat "$TRASH/stskeys"); do grep -q "^$k " "$TRASH/ls" || return 1; done &&
	! grep -F "$NRS_STS_TOKEN" "$LOG" &&
	! grep -F "$NRS_STS_SECRET_KEY" "$LOG"
'

test_expect_success 'STS credentials without their token: refused at mount' '
	AWS_ACCESS_KEY_ID=$NRS_STS_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$NRS_STS_SECRET_KEY \
		test_must_fail nrs_mount -o "$FAST$S3" &&
	nrs_log_since_mount | grep "S3 $NRS_S3_URL: refused (HTTP 403 InvalidAccessKeyId"
'

test_expect_success 'an AWS_SESSION_TOKEN= line in the s3_credentials file' '
	creds=$TRASH/creds &&
	printf "AWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\nAWS_SESSION_TOKEN=%s\n" \
		"$NRS_STS_ACCESS_KEY" "$NRS_STS_SECRET_KEY" "$NRS_STS_TOKEN" >"$creds" &&
	chmod 600 "$creds" &&
	unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY &&
	{ nrs_mount -o "s3_credentials=$creds,$FAST$S3"; rc=$?; } &&
	AWS_ACCESS_KEY_ID=$NRS_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$NRS_S3_SECRET_KEY &&
	export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY &&
	test "$rc" = 0 &&
	cmp "$TRASH/sts" "$MNT/sts" &&
	echo more >>"$MNT/sts" &&
	wait_materialized "$MNT/sts" &&
	nrs_umount
'

test_expect_success 'a healthy store: no errors in /.nereus/metrics' '
	nrs_mount -o "$FAST$S3" &&
	grep "^nereus_object_store_errors_total{class=\"signature\"} 0" "$MNT/.nereus/metrics" &&
	grep "^nereus_object_store_errors_total{class=\"unavailable\"} 0" "$MNT/.nereus/metrics" &&
	nrs_umount
'

test_done
