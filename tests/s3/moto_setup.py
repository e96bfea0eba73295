# moto_setup.py URL BUCKET - with the first, unauthenticated requests moto
# allows (INITIAL_NO_AUTH_ACTION_COUNT=3 in moto.sh: exactly the three IAM
# calls below), make an IAM user with an access key and a policy that
# allows S3 and STS; then, signed with that key, the bucket.  Prints the
# key as shell assignments.  Every later request must be signed right.
import json
import sys

import boto3

url, bucket = sys.argv[1], sys.argv[2]
anon = dict(endpoint_url=url, region_name="us-east-1",
            aws_access_key_id="anonymous", aws_secret_access_key="anonymous")
iam = boto3.client("iam", **anon)
iam.create_user(UserName="nereus")
key = iam.create_access_key(UserName="nereus")["AccessKey"]
iam.put_user_policy(
    UserName="nereus", PolicyName="nereus",
    PolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow",
                       "Action": ["s3:*", "sts:*", "iam:*"],
                       "Resource": "*"}]}))
s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                  aws_access_key_id=key["AccessKeyId"],
                  aws_secret_access_key=key["SecretAccessKey"])
s3.create_bucket(Bucket=bucket)
print("NRS_S3_ACCESS_KEY='%s'" % key["AccessKeyId"])
print("NRS_S3_SECRET_KEY='%s'" % key["SecretAccessKey"])
