# boto3_bench.py - the baseline of the object benchmark on moto_server
# (tests/bench/run.sh, store moto): boto3 doing the PUTs and GETs
# nereusfs does, timed after the imports and the clients are made.
#
#   boto3_bench.py put N COUNT FILE PREFIX
#       N threads put COUNT objects (FILE's bytes) between them, each its
#       share one after another, as PREFIX/W-I, with Content-MD5 and
#       x-amz-meta-sha256 computed once beforehand
#   boto3_bench.py get P KEY...
#       P threads get the objects KEY... whole, each every P-th one
#   boto3_bench.py putlat N COUNT SIZE PREFIX
#       as put, of COUNT objects of SIZE random bytes; prints
#       "mbps=M p50_ms=A p99_ms=B", the latency of one PUT (the object
#       WAL's baseline, tests/bench/owal.sh)
# Prints MB/s (10^6 bytes).  Environment: NRS_S3_URL
# (http://HOST:PORT/BUCKET), NRS_S3_ACCESS_KEY, NRS_S3_SECRET_KEY.
import base64
import hashlib
import os
import sys
import threading
import time

import boto3

base, bucket = os.environ["NRS_S3_URL"].rsplit("/", 1)


def client():
    return boto3.client("s3", endpoint_url=base, region_name="us-east-1",
                        aws_access_key_id=os.environ["NRS_S3_ACCESS_KEY"],
                        aws_secret_access_key=os.environ["NRS_S3_SECRET_KEY"])


def run(n, work, quiet=False):
    clients = [client() for _ in range(n)]
    errors = []
    done = [0]

    def one(i):
        try:
            done[0] += work(clients[i], i)
        except Exception as e:  # reported, and the run fails
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t1 = time.monotonic()
    if errors:
        sys.exit("boto3_bench: %s" % errors[0])
    if quiet:
        return done[0] / (t1 - t0) / 1e6
    print("%.1f" % (done[0] / (t1 - t0) / 1e6))


if sys.argv[1] == "put" and len(sys.argv) == 6:
    n, count = int(sys.argv[2]), int(sys.argv[3])
    with open(sys.argv[4], "rb") as f:
        body = f.read()
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    sha = hashlib.sha256(body).hexdigest()

    def put(c, w):
        k = count // n + (w < count % n)
        for i in range(k):
            c.put_object(Bucket=bucket, Key="%s/%d-%d" % (sys.argv[5], w, i),
                         Body=body, ContentMD5=md5, Metadata={"sha256": sha})
        return k * len(body)
    run(n, put)
elif sys.argv[1] == "putlat" and len(sys.argv) == 6:
    n, count, size = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    body = os.urandom(size)
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    sha = hashlib.sha256(body).hexdigest()
    lat = []

    def putlat(c, w):
        k = count // n + (w < count % n)
        for i in range(k):
            t = time.monotonic()
            c.put_object(Bucket=bucket, Key="%s/%d-%d" % (sys.argv[5], w, i),
                         Body=body, ContentMD5=md5, Metadata={"sha256": sha})
            lat.append(time.monotonic() - t)
        return k * len(body)
    mb = run(n, putlat, quiet=True)
    lat.sort()
    print("mbps=%.2f p50_ms=%.2f p99_ms=%.2f" %
          (mb, lat[len(lat) // 2] * 1e3, lat[min(len(lat) - 1,
                                                  len(lat) * 99 // 100)] * 1e3))
elif sys.argv[1] == "get" and len(sys.argv) >= 4:
    p, keys = int(sys.argv[2]), sys.argv[3:]

    def get(c, w):
        got = 0
        for k in keys[w::p]:
            got += len(c.get_object(Bucket=bucket, Key=k)["Body"].read())
        return got
    run(p, get)
else:
    sys.exit("usage: boto3_bench.py put N COUNT FILE PREFIX | get P KEY... |"
             " putlat N COUNT SIZE PREFIX")
