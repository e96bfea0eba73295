#!/bin/sh
test_description='metadata checkpoints on S3 (a real s3rver): ckpt/latest and ckpt/SEQ with their SHA-256 in the metadata, as boto3 sees them; restored into an empty data directory with the same namespace and xattrs'
. "${NRS_TESTLIB:-$(dirname "$0")/../lib/lib.sh}"
. "$nrs_lib/s3.sh"

nrs_s3_start
CKPT_STORE=s3:$NRS_S3_URL
. "$nrs_lib/checkpoint.sh"

# boto3, an independent client: both keys exist, each object's bytes have
# the SHA-256 of its x-amz-meta-sha256, and the pointer names SEQ with the
# checkpoint's length and SHA-256 (ckptfmt.c).  The keys: s3.sh exports
# them as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
boto_check () { # SEQ
	python3 - "$1" "$NRS_S3_URL" <<'PY'
import hashlib, struct, sys
import boto3
base, bucket = sys.argv[2].rsplit("/", 1)
s3 = boto3.client("s3", endpoint_url=base, region_name="us-east-1")
seq = int(sys.argv[1])
got = {}
for key in ("ckpt/latest", "ckpt/%016x" % seq):
    h = s3.head_object(Bucket=bucket, Key=key)
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    sha = hashlib.sha256(body).hexdigest()
    assert h["Metadata"].get("sha256") == sha, (key, h["Metadata"], sha)
    assert h["ContentLength"] == len(body)
    got[key] = (body, sha)
    print("#", key, len(body), sha)
ptr, _ = got["ckpt/latest"]
obj, sha = got["ckpt/%016x" % seq]
assert ptr[:8] == b"NRSCKLAT" and len(ptr) == 72
pseq, plen = struct.unpack_from("<QQ", ptr, 16)
assert (pseq, plen, ptr[32:64].hex()) == (seq, len(obj), sha)
assert obj[:8] == b"NRSCKPT\0" and struct.unpack_from("<Q", obj, 16)[0] == seq
PY
}

test_expect_success 'boto3 sees ckpt/latest and ckpt/SEQ with their SHA-256 in the metadata' '
	seq=$(nrs-ckpt find "$CKPT_STORE" | sed -n "s/^top \([0-9]*\) .*/\1/p") &&
	test "$seq" -ge 1 &&
	boto_check "$seq"
'
test_done
