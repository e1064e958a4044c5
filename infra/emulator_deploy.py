#!/usr/bin/env python3
"""Deploy infra/template.yaml into moto's CloudFormation and check the result.

moto does not run the SAM transform, so this script expands the template
locally with aws-sam-translator (the library behind `sam` and the
AWS::Serverless transform), points every function's CodeUri at a tiny
placeholder zip it uploads to moto's S3 (moto never runs it), creates the
prerequisites the template takes by parameter (VPC subnet, security group,
Secrets Manager secrets), creates two stacks (defaults / every option on),
waits for CREATE_COMPLETE and checks the resources that came out.

Resource types moto's CloudFormation does not implement are skipped by moto
with a warning; they are listed in the summary, and any skipped type not in
EXPECTED_SKIPS fails the check.

Usage: emulator_deploy.py --endpoint http://127.0.0.1:PORT [--template PATH]
                          [--expanded-out PATH]
       emulator_deploy.py --endpoint URL --verify-init   (check what
                          localstack/init-aws.sh created; no deploy)
Needs: boto3 and aws-sam-translator (installed by infra/check.sh).
"""

from __future__ import annotations

import argparse
import ast
import copy
import io
import json
import os
import sys
import time
import zipfile
from pathlib import Path

import boto3
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator
from samtranslator.yaml_helper import yaml_parse

REGION = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "eu-west-1"
CODE_BUCKET = "toki-emulator-code"
CODE_KEY = "placeholder/bootstrap.zip"

# Types the expanded template contains that moto 5.2.5's CloudFormation skips.
EXPECTED_SKIPS = {
    "AWS::ApiGatewayV2::Api": "HTTP API (registrar endpoint)",
    "AWS::ApiGatewayV2::Stage": "HTTP API $default stage",
    "AWS::CloudWatch::Alarm": "alarms",
    "AWS::Lambda::EventInvokeConfig": "scanner async retry settings",
}

FAILURES: list[str] = []


def ok(msg: str) -> None:
    print(f"  ok    {msg}")


def fail(msg: str) -> None:
    print(f"  FAIL  {msg}")
    FAILURES.append(msg)


def check(cond: bool, msg: str, detail: str = "") -> None:
    if cond:
        ok(msg)
    else:
        fail(f"{msg}{': ' + detail if detail else ''}")


# --------------------------------------------------------------------------- expansion
def expand(template_path: Path) -> dict:
    """SAM -> plain CloudFormation, with CodeUri pointing at the placeholder zip."""
    sam = yaml_parse(template_path.read_text())
    for res in sam.get("Resources", {}).values():
        if res.get("Type") == "AWS::Serverless::Function":
            res["Properties"]["CodeUri"] = {"Bucket": CODE_BUCKET, "Key": CODE_KEY}
    session = boto3.session.Session(region_name=REGION)
    translator = Translator(managed_policy_map={}, sam_parser=Parser(), boto_session=session)
    cfn = translator.translate(sam_template=copy.deepcopy(sam), parameter_values={})
    # aws-sam-translator may return non-JSON types (e.g. ordered dicts); normalise.
    return json.loads(json.dumps(cfn))


def placeholder_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        info = zipfile.ZipInfo("bootstrap")
        info.external_attr = 0o755 << 16
        zf.writestr(info, "#!/bin/sh\necho 'toki placeholder: build the real bootstrap with cargo lambda' >&2\nexit 1\n")
    return buf.getvalue()


# --------------------------------------------------------------------------- deploy
def clients(endpoint: str) -> dict:
    def c(name: str):
        return boto3.client(name, endpoint_url=endpoint, region_name=REGION)

    return {n: c(n) for n in ("cloudformation", "s3", "ec2", "secretsmanager", "dynamodb", "sqs",
                              "lambda", "events", "iam", "ecs", "logs", "sns")}


def prerequisites(cl: dict) -> dict:
    s3 = cl["s3"]
    if REGION == "us-east-1":
        s3.create_bucket(Bucket=CODE_BUCKET)
    else:
        s3.create_bucket(Bucket=CODE_BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_object(Bucket=CODE_BUCKET, Key=CODE_KEY, Body=placeholder_zip())

    ec2 = cl["ec2"]
    vpc = ec2.create_vpc(CidrBlock="10.42.0.0/16")["Vpc"]["VpcId"]
    subnets = [
        ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.42.{i}.0/24", AvailabilityZone=f"{REGION}{az}")["Subnet"]["SubnetId"]
        for i, az in ((1, "a"), (2, "b"))
    ]
    sg = ec2.create_security_group(GroupName="toki-daemon", Description="toki daemon", VpcId=vpc)["GroupId"]

    sm = cl["secretsmanager"]

    def secret(name: str, body: dict) -> str:
        return sm.create_secret(Name=name, SecretString=json.dumps(body))["ARN"]

    return {
        "subnets": subnets,
        "sg": sg,
        "db": secret("toki/database", {"database_url_template": "postgres://toki:pw@db:5432/toki_{tenant}"}),
        "slack": secret("toki/slack", {"slack_token": "xoxb-placeholder"}),
        "smtp": secret("toki/smtp", {"smtp_url": "smtps://u:p@email-smtp.eu-west-1.amazonaws.com:465"}),
    }


def params(values: dict) -> list[dict]:
    return [{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()]


def deploy(cl: dict, name: str, body: str, parameters: dict) -> dict | None:
    cf = cl["cloudformation"]
    cf.create_stack(StackName=name, TemplateBody=body, Parameters=params(parameters),
                    Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"])
    deadline = time.time() + 120
    while True:
        stack = cf.describe_stacks(StackName=name)["Stacks"][0]
        if not stack["StackStatus"].endswith("_IN_PROGRESS") or time.time() > deadline:
            return stack
        time.sleep(0.5)


def report_stack(cl: dict, name: str, expanded: dict, stack: dict) -> dict:
    status = stack["StackStatus"]
    created = {r["LogicalResourceId"]: r for r in
               cl["cloudformation"].list_stack_resources(StackName=name)["StackResourceSummaries"]}
    skipped = {}
    for lid, res in expanded["Resources"].items():
        if lid not in created:
            skipped[lid] = res["Type"]
    unexpected = {lid: t for lid, t in skipped.items() if t not in EXPECTED_SKIPS}
    check(status == "CREATE_COMPLETE", f"stack {name}: {status}", stack.get("StackStatusReason", ""))
    print(f"        {len(created)} resources created, {len(skipped)} skipped by moto")
    by_type: dict[str, list[str]] = {}
    for lid, t in skipped.items():
        by_type.setdefault(t, []).append(lid)
    for t, lids in sorted(by_type.items()):
        why = EXPECTED_SKIPS.get(t, "UNEXPECTED")
        print(f"        skipped {t} x{len(lids)} ({why}): {', '.join(sorted(lids))}")
    check(not unexpected, f"stack {name}: only known-unsupported types skipped", json.dumps(unexpected))
    return {o["OutputKey"]: o.get("OutputValue") for o in stack.get("Outputs", [])}


# --------------------------------------------------------------------------- checks
def check_store(cl: dict, index: str, directory: str, queue: str, dlq: str) -> tuple[str, str]:
    """The tables and queues of the contract, whoever created them (stack or init-aws.sh)."""
    ddb, sqs = cl["dynamodb"], cl["sqs"]
    t = ddb.describe_table(TableName=index)["Table"]
    keys = {k["AttributeName"]: k["KeyType"] for k in t["KeySchema"]}
    gsis = {g["IndexName"]: g for g in t.get("GlobalSecondaryIndexes", [])}
    g = gsis.get("by_schedule", {})
    gkeys = {k["AttributeName"]: k["KeyType"] for k in g.get("KeySchema", [])}
    check(keys == {"pk": "HASH", "sk": "RANGE"}
          and gkeys == {"sched": "HASH", "sk": "RANGE"}
          and g.get("Projection", {}).get("ProjectionType") == "ALL"
          and t.get("BillingModeSummary", {}).get("BillingMode") == "PAY_PER_REQUEST",
          f"{index}: pk/sk, GSI by_schedule(sched, sk) ALL, on-demand", json.dumps({"keys": keys, "gsi": gkeys}))
    d = ddb.describe_table(TableName=directory)["Table"]
    check([k["AttributeName"] for k in d["KeySchema"]] == ["tenant"], f"{directory}: partition key tenant")

    qurl = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    durl = sqs.get_queue_url(QueueName=dlq)["QueueUrl"]
    qa = sqs.get_queue_attributes(QueueUrl=qurl, AttributeNames=["All"])["Attributes"]
    da = sqs.get_queue_attributes(QueueUrl=durl, AttributeNames=["All"])["Attributes"]
    redrive = json.loads(qa.get("RedrivePolicy", "{}"))
    check(qa.get("VisibilityTimeout") == "60" and qa.get("ReceiveMessageWaitTimeSeconds") == "20"
          and redrive.get("deadLetterTargetArn") == da.get("QueueArn")
          and int(redrive.get("maxReceiveCount", 0)) == 5,
          f"{queue}: visibility 60, wait 20, redrive to DLQ after 5", json.dumps(qa))
    check(da.get("MessageRetentionPeriod") == "1209600", f"{dlq}: retention 14 days")
    return qurl, durl


def check_stack(cl: dict, env: str, outputs: dict, full: bool, pre: dict) -> None:
    lam, iam, ecs, events = (cl[n] for n in ("lambda", "iam", "ecs", "events"))
    index = f"toki-{env}-reminders"
    directory = f"toki-{env}-tenants"
    queue = f"toki-{env}-reminders"
    dlq = f"toki-{env}-reminders-dlq"

    want_outputs = {"IndexTableName", "DirectoryTableName", "QueueUrl", "DlqUrl", "QueueName", "DlqName", "RegistrarApiUrl"}
    check(want_outputs <= set(outputs), "outputs: table names, queue/DLQ URLs, registrar API URL",
          f"missing {sorted(want_outputs - set(outputs))}")
    check(outputs.get("IndexTableName") == index and outputs.get("QueueName") == queue, "output names match the contract")

    qurl, durl = check_store(cl, index, directory, queue, dlq)
    # moto answers Ref with the canonical https://sqs.<region>... URL, get_queue_url with its own host.
    check(str(outputs.get("QueueUrl")).endswith(qurl.split("/", 3)[3]) and str(outputs.get("DlqUrl")).endswith(durl.split("/", 3)[3]),
          "QueueUrl/DlqUrl outputs name the queues", f"{outputs.get('QueueUrl')} vs {qurl}")

    for fn, extra in ((f"toki-{env}-scanner", set()), (f"toki-{env}-registrar", {"TOKI_DATABASE_URL_TEMPLATE"})):
        conf = lam.get_function_configuration(FunctionName=fn)
        envv = conf.get("Environment", {}).get("Variables", {})
        need = {"TOKI_BACKEND", "TOKI_INDEX_TABLE", "TOKI_DIRECTORY_TABLE", "TOKI_QUEUE_NAME", "TOKI_DLQ_NAME", "TOKI_SHARDS"} | extra
        check(conf["Runtime"] == "provided.al2023" and conf["Handler"] == "bootstrap"
              and need <= set(envv) and envv.get("TOKI_BACKEND") == "aws"
              and envv.get("TOKI_INDEX_TABLE") == index and envv.get("TOKI_QUEUE_NAME") == queue,
              f"lambda {fn}: provided.al2023/bootstrap, TOKI_* env", json.dumps(envv))

    rules = events.list_rules()["Rules"]
    scanner_arn = lam.get_function_configuration(FunctionName=f"toki-{env}-scanner")["FunctionArn"]
    ticking = [r for r in rules if r.get("ScheduleExpression") == "rate(1 minute)" and any(
        tg["Arn"] == scanner_arn for tg in events.list_targets_by_rule(Rule=r["Name"])["Targets"])]
    check(bool(ticking), "EventBridge rule rate(1 minute) -> scanner")

    def actions(role: str) -> set[str]:
        acts: set[str] = set()
        for pn in iam.list_role_policies(RoleName=role)["PolicyNames"]:
            doc = iam.get_role_policy(RoleName=role, PolicyName=pn)["PolicyDocument"]
            if isinstance(doc, str):  # moto returns the CloudFormation dict as its Python repr
                try:
                    doc = json.loads(doc)
                except ValueError:
                    doc = ast.literal_eval(doc)
            for st in doc["Statement"]:
                a = st["Action"]
                acts |= {a} if isinstance(a, str) else set(a)
        return acts

    scanner = actions(f"toki-{env}-scanner")
    registrar = actions(f"toki-{env}-registrar")
    daemon = actions(f"toki-{env}-daemon-task")
    check({"dynamodb:Query", "dynamodb:UpdateItem", "sqs:SendMessage"} <= scanner
          and not any(a.startswith("secretsmanager:") or a in ("sqs:ReceiveMessage", "sqs:DeleteMessage") for a in scanner),
          "scanner role: index Query/UpdateItem + SendMessage, no secrets, no receive", str(sorted(scanner)))
    check({"dynamodb:BatchWriteItem", "dynamodb:PutItem", "sqs:SendMessage", "secretsmanager:GetSecretValue"} <= registrar
          and "sqs:ReceiveMessage" not in registrar, "registrar role: index writes, SendMessage, DB secret", str(sorted(registrar)))
    check({"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"} <= daemon
          and not any(a.startswith("dynamodb:") for a in daemon), "daemon task role: queue consume only, nothing on DynamoDB",
          str(sorted(daemon)))
    # (moto's CloudFormation ignores ManagedPolicyArns, so the VPC access policy is not checked here.)
    vpc = lam.get_function_configuration(FunctionName=f"toki-{env}-registrar").get("VpcConfig") or {}
    check(sorted(vpc.get("SubnetIds", [])) == (sorted(pre["subnets"]) if full else []),
          f"registrar VpcConfig {'set' if full else 'absent'} (RegistrarInVpc={'true' if full else 'false'})", json.dumps(vpc))

    svc = ecs.describe_services(cluster=f"toki-{env}", services=[f"toki-{env}-daemon"])["services"]
    check(bool(svc) and svc[0]["desiredCount"] == (3 if full else 2), f"ECS service toki-{env}-daemon desired count",
          json.dumps(svc[0]["desiredCount"] if svc else None))
    tds = ecs.list_task_definitions(familyPrefix=f"toki-{env}-daemon")["taskDefinitionArns"]
    cd = ecs.describe_task_definition(taskDefinition=tds[-1])["taskDefinition"]["containerDefinitions"][0] if tds else {}
    envs = {e["name"]: e["value"] for e in cd.get("environment", [])}
    secrets = {s["name"] for s in (cd.get("secrets") or []) if s}
    want_secrets = {"TOKI_DATABASE_URL_TEMPLATE"} | ({"TOKI_SLACK_TOKEN", "TOKI_SMTP_URL"} if full else set())
    workers = "16" if full else "8"
    check(cd.get("command") == ["--workers", workers] and envs.get("TOKI_WORKERS") == workers
          and envs.get("TOKI_BACKEND") == "aws" and envs.get("TOKI_QUEUE_NAME") == queue,
          f"daemon task: --workers {workers}, TOKI_* env", json.dumps({"command": cd.get("command"), "env": envs}))
    check(secrets == want_secrets, f"daemon task secrets: {', '.join(sorted(want_secrets))}", str(sorted(secrets)))


# --------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--template", default=str(Path(__file__).with_name("template.yaml")))
    ap.add_argument("--expanded-out", help="also write the expanded CloudFormation JSON here")
    ap.add_argument("--verify-init", action="store_true",
                    help="deploy nothing; check the tables and queues localstack/init-aws.sh created (TOKI_* names)")
    args = ap.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

    if args.verify_init:
        cl = clients(args.endpoint)
        index = os.environ.get("TOKI_INDEX_TABLE") or "toki-reminders"
        check_store(cl, index, os.environ.get("TOKI_DIRECTORY_TABLE") or "toki-tenants",
                    os.environ.get("TOKI_QUEUE_NAME") or "toki-reminders",
                    os.environ.get("TOKI_DLQ_NAME") or "toki-reminders-dlq")
        ttl = cl["dynamodb"].describe_time_to_live(TableName=index)["TimeToLiveDescription"]
        check(ttl.get("TimeToLiveStatus") == "ENABLED" and ttl.get("AttributeName") == "expires_at",
              f"{index}: TTL on expires_at", json.dumps(ttl))
        return 1 if FAILURES else 0

    template = Path(args.template)
    sam_count = len(yaml_parse(template.read_text())["Resources"])
    expanded = expand(template)
    body = json.dumps(expanded, indent=1)
    if args.expanded_out:
        Path(args.expanded_out).write_text(body)
    print(f"SAM expansion: {sam_count} template resources -> {len(expanded['Resources'])} CloudFormation resources")

    cl = clients(args.endpoint)
    pre = prerequisites(cl)
    common = {
        "DaemonImageUri": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/toki-daemon:check",
        "SubnetIds": ",".join(pre["subnets"]),
        "SecurityGroupId": pre["sg"],
        "DatabaseUrlSecretArn": pre["db"],
        "MailFrom": "Toki <reminders@example.com>",
    }
    variants = [
        ("toki-check-min", "chkmin", False, {}),
        ("toki-check-full", "chkfull", True, {
            "DesiredCount": "3", "Workers": "16", "DaemonCpu": "1024", "DaemonMemory": "2048",
            "DaemonCpuArchitecture": "ARM64", "LambdaArchitecture": "arm64", "RegistrarInVpc": "true",
            "AssignPublicIp": "ENABLED", "SlackTokenSecretArn": pre["slack"], "SmtpUrlSecretArn": pre["smtp"],
            "AlarmEmail": "ops@example.com",
        }),
    ]
    for stack_name, env, full, extra in variants:
        label = "every option on" if full else "defaults"
        print(f"\nstack {stack_name} (EnvironmentName={env}, {label})")
        stack = deploy(cl, stack_name, body, {**common, "EnvironmentName": env, **extra})
        outputs = report_stack(cl, stack_name, expanded, stack)
        if stack["StackStatus"] == "CREATE_COMPLETE":
            check_stack(cl, env, outputs, full, pre)

    print()
    if FAILURES:
        print(f"emulator deploy: {len(FAILURES)} check(s) FAILED")
        return 1
    print("emulator deploy: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
