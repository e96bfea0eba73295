# moto_ls.py - the bucket as an independent client (boto3) sees it, for
# the tests on moto_server (tests/integ/moto.sh).  Environment: NRS_S3_URL
# (http://127.0.0.1:PORT/BUCKET), NRS_S3_ACCESS_KEY, NRS_S3_SECRET_KEY.
#
#   moto_ls.py              one line per object: "KEY LENGTH SHA256", the
#                           last its x-amz-meta-sha256 ("-" if none)
#   moto_ls.py sync DIR     make DIR hold each object as the file DIR/KEY,
#                           byte for byte, and nothing else
#   moto_ls.py put KEY FILE store FILE's bytes under KEY, keeping the
#                           object's metadata (to damage an object)
import os
import sys

import boto3

base, bucket = os.environ["NRS_S3_URL"].rsplit("/", 1)
s3 = boto3.client("s3", endpoint_url=base, region_name="us-east-1",
                  aws_access_key_id=os.environ["NRS_S3_ACCESS_KEY"],
                  aws_secret_access_key=os.environ["NRS_S3_SECRET_KEY"])


def objects():
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            yield o


if len(sys.argv) == 1:
    for o in objects():
        h = s3.head_object(Bucket=bucket, Key=o["Key"])
        print(o["Key"], o["Size"], h.get("Metadata", {}).get("sha256", "-"))
elif sys.argv[1] == "sync" and len(sys.argv) == 3:
    # Only what changed is fetched: DIR.etags remembers each file's ETag.
    d = sys.argv[2]
    tags = d + ".etags"
    old = {}
    if os.path.exists(tags):
        with open(tags) as f:
            old = dict(line.rstrip("\n").split(" ", 1) for line in f if " " in line)
    new = {}
    for o in objects():
        k, path = o["Key"], os.path.join(d, o["Key"])
        new[k] = o["ETag"]
        if old.get(k) == o["ETag"] and os.path.exists(path):
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        body = s3.get_object(Bucket=bucket, Key=k)["Body"].read()
        with open(path + ".tmp", "wb") as f:
            f.write(body)
        os.rename(path + ".tmp", path)
    for k in old:
        if k not in new and os.path.exists(os.path.join(d, k)):
            os.unlink(os.path.join(d, k))
    os.makedirs(d, exist_ok=True)
    with open(tags, "w") as f:
        for k, t in new.items():
            f.write("%s %s\n" % (k, t))
elif sys.argv[1] == "put" and len(sys.argv) == 4:
    key = sys.argv[2]
    meta = s3.head_object(Bucket=bucket, Key=key).get("Metadata", {})
    with open(sys.argv[3], "rb") as f:
        s3.put_object(Bucket=bucket, Key=key, Body=f.read(), Metadata=meta)
else:
    sys.exit("usage: moto_ls.py [sync DIR | put KEY FILE]")
