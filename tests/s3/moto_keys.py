# moto_keys.py - access keys to rotate, for the tests: of a user
# "nereus-rot" (made on first use, allowed S3), not the fixture's own, whose
# key the test keeps using (a user has at most two keys):
#   moto_keys.py new         a new access key, as shell assignments
#                            NRS_NEW_ACCESS_KEY and NRS_NEW_SECRET_KEY
#   moto_keys.py delete AKID delete that key: moto refuses it from then on
# Environment: NRS_S3_URL, NRS_S3_ACCESS_KEY, NRS_S3_SECRET_KEY (a key of
# that user, which may use IAM: tests/s3/moto_setup.py).
import json
import os
import sys

import boto3

base = os.environ["NRS_S3_URL"].rsplit("/", 1)[0]
iam = boto3.client("iam", endpoint_url=base, region_name="us-east-1",
                   aws_access_key_id=os.environ["NRS_S3_ACCESS_KEY"],
                   aws_secret_access_key=os.environ["NRS_S3_SECRET_KEY"])
USER = "nereus-rot"
if sys.argv[1:] == ["new"]:
    try:
        iam.get_user(UserName=USER)
    except iam.exceptions.NoSuchEntityException:
        iam.create_user(UserName=USER)
        iam.put_user_policy(
            UserName=USER, PolicyName="s3",
            PolicyDocument=json.dumps({
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": "s3:*",
                               "Resource": "*"}]}))
    k = iam.create_access_key(UserName=USER)["AccessKey"]
    print("NRS_NEW_ACCESS_KEY='%s'" % k["AccessKeyId"])
    print("NRS_NEW_SECRET_KEY='%s'" % k["SecretAccessKey"])
elif len(sys.argv) == 3 and sys.argv[1] == "delete":
    iam.delete_access_key(UserName=USER, AccessKeyId=sys.argv[2])
else:
    sys.exit("usage: moto_keys.py new | delete AKID")
