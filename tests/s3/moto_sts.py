# moto_sts.py - temporary credentials from moto's STS for the tests: make
# (once) a role the test's IAM user may assume, with S3 rights, then
# assume it; print AKID, secret and session token as shell assignments
# NRS_STS_ACCESS_KEY, NRS_STS_SECRET_KEY, NRS_STS_TOKEN.  Environment:
# NRS_S3_URL, NRS_S3_ACCESS_KEY, NRS_S3_SECRET_KEY (the fixture's user,
# tests/s3/moto_setup.py, may use IAM and STS).
import json
import os

import boto3

base = os.environ["NRS_S3_URL"].rsplit("/", 1)[0]
kw = dict(endpoint_url=base, region_name="us-east-1",
          aws_access_key_id=os.environ["NRS_S3_ACCESS_KEY"],
          aws_secret_access_key=os.environ["NRS_S3_SECRET_KEY"])
iam = boto3.client("iam", **kw)
try:
    arn = iam.get_role(RoleName="nereus")["Role"]["Arn"]
except iam.exceptions.NoSuchEntityException:
    arn = iam.create_role(
        RoleName="nereus",
        AssumeRolePolicyDocument=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"},
                           "Action": "sts:AssumeRole"}]}))["Role"]["Arn"]
    iam.put_role_policy(
        RoleName="nereus", PolicyName="s3",
        PolicyDocument=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*",
                           "Resource": "*"}]}))
c = boto3.client("sts", **kw).assume_role(
    RoleArn=arn, RoleSessionName="nereusfs-test")["Credentials"]
print("NRS_STS_ACCESS_KEY='%s'" % c["AccessKeyId"])
print("NRS_STS_SECRET_KEY='%s'" % c["SecretAccessKey"])
print("NRS_STS_TOKEN='%s'" % c["SessionToken"])
