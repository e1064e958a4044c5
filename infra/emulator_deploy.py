#!/usr/bin/env python3
"""Deploy infra/template.yaml into moto's CloudFormation and check the result.

moto does not run the SAM transform, so this script expands the template
locally with aws-sam-translator (the library behind `sam` and the
AWS::Serverless transform), points every function's CodeUri at a tiny
placeholder zip it uploads to moto's S3 (moto never runs it), creates the
prerequisites the template takes by parameter (VPC, subnets, route table,
security group, Secrets Manager secrets), creates two stacks (defaults with
DatabaseMode=aurora / every option with DatabaseMode=existing), waits for
CREATE_COMPLETE, checks the resources that came out, then deletes the first
stack and checks that what must outlive it (tables, queues, log groups) did.

Resource types moto's CloudFormation does not implement are skipped by moto
with a warning; they are listed in the summary, and any skipped type not in
EXPECTED_SKIPS fails the check. References to them (Ref, GetAtt, Sub) are
replaced before the deploy by the marker "skipped:<LogicalId>[.<Attribute>]"
(moto would otherwise fail on a GetAtt, or write None), so the checks still
see which resource each value and permission is wired to. Types moto does
implement but cannot create without a skipped resource (EMULATOR_OMITS) are
left out of the deployed template and listed too. The properties of the
skipped resources that matter are checked in the expanded template instead
("template:" lines).

Every secret the prerequisites create holds a sentinel value; after the
deploys no template, Lambda configuration, task definition, output or
parameter may contain any of them.

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
import re
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import boto3
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator
from samtranslator.yaml_helper import yaml_parse

REGION = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "eu-west-1"
CODE_BUCKET = "toki-emulator-code"
CODE_KEY = "placeholder/bootstrap.zip"
SKIPPED = "skipped:"

# Types the expanded template contains that moto 5.2.5's CloudFormation skips.
EXPECTED_SKIPS = {
    "AWS::ApiGatewayV2::Api": "HTTP API (registrar endpoint)",
    "AWS::ApiGatewayV2::Stage": "HTTP API $default stage",
    "AWS::ApplicationAutoScaling::ScalableTarget": "daemon autoscaling target + peak schedule",
    "AWS::ApplicationAutoScaling::ScalingPolicy": "daemon backlog-per-task policy",
    "AWS::CloudFormation::WaitConditionHandle": "ordering only (daemon after the database)",
    "AWS::CloudWatch::Alarm": "alarms",
    "AWS::Lambda::EventInvokeConfig": "scanner/repair async retry settings",
    "AWS::RDS::DBCluster": "Aurora Serverless v2 cluster",
    "AWS::RDS::DBClusterParameterGroup": "Aurora cluster parameters (force_ssl)",
    "AWS::RDS::DBProxy": "RDS Proxy",
    "AWS::RDS::DBProxyTargetGroup": "RDS Proxy target",
    "AWS::SecretsManager::Secret": "generated runtime database secret",
}
# Types moto implements, left out because what they need is skipped.
EMULATOR_OMITS = {
    "AWS::RDS::DBInstance": "Aurora instance; moto needs its cluster, which moto's CloudFormation does not create",
}

HEALTH_CHECK = {"command": ["CMD", "toki-daemon", "healthcheck"], "interval": 15, "timeout": 5,
                "retries": 3, "startPeriod": 30}

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


def conditions(cfn: dict, values: dict) -> dict[str, bool]:
    """Evaluate the template's Conditions for these parameter values (+ defaults)."""
    params = {k: str(p.get("Default", "")) for k, p in cfn.get("Parameters", {}).items()}
    params.update(values)
    out: dict[str, bool] = {}

    def ev(node: Any) -> Any:
        if isinstance(node, dict):
            (fn, arg), = node.items()
            if fn == "Ref":
                return params[arg]
            if fn == "Condition":
                return cond(arg)
            if fn == "Fn::Equals":
                return str(ev(arg[0])) == str(ev(arg[1]))
            if fn == "Fn::Not":
                return not ev(arg[0])
            if fn == "Fn::And":
                return all(ev(a) for a in arg)
            if fn == "Fn::Or":
                return any(ev(a) for a in arg)
            raise ValueError(f"condition function {fn} not handled")
        return node

    def cond(name: str) -> bool:
        if name not in out:
            out[name] = bool(ev(cfn["Conditions"][name]))
        return out[name]

    for name in cfn.get("Conditions", {}):
        cond(name)
    return out


def for_moto(cfn: dict, conds: dict[str, bool]) -> tuple[dict, dict[str, str], dict[str, str]]:
    """The template moto gets: omitted resources removed, references to
    skipped/omitted resources replaced by markers. Returns (template,
    active skipped {id: type}, active omitted {id: type})."""
    body = copy.deepcopy(cfn)
    res = body["Resources"]
    active = {lid for lid, r in res.items() if conds.get(r.get("Condition", ""), True)}
    gone = {lid for lid, r in res.items() if r["Type"] in EXPECTED_SKIPS or r["Type"] in EMULATOR_OMITS}
    sub_ref = re.compile(r"\$\{([A-Za-z0-9]+)((?:\.[A-Za-z0-9]+)*)\}")

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            if set(node) == {"Ref"} and node["Ref"] in gone:
                return f"{SKIPPED}{node['Ref']}"
            if set(node) == {"Fn::GetAtt"}:
                ga = node["Fn::GetAtt"]
                lid, attr = (ga.split(".", 1) if isinstance(ga, str) else (ga[0], ".".join(ga[1:])))
                if lid in gone:
                    return f"{SKIPPED}{lid}.{attr}"
            if set(node) == {"Fn::Sub"}:
                sub = node["Fn::Sub"]
                text, extra = (sub, {}) if isinstance(sub, str) else (sub[0], sub[1])
                text = sub_ref.sub(lambda m: f"{SKIPPED}{m.group(1)}{m.group(2)}" if m.group(1) in gone and m.group(1) not in extra else m.group(0), text)
                extra = {k: rewrite(v) for k, v in extra.items()}
                return {"Fn::Sub": text if not extra else [text, extra]}
            return {k: rewrite(v) for k, v in node.items()}
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    omitted = {lid: r["Type"] for lid, r in res.items() if r["Type"] in EMULATOR_OMITS}
    for lid in omitted:
        del res[lid]
    for lid, r in list(res.items()):
        deps = r.get("DependsOn")
        if deps:
            deps = [d for d in ([deps] if isinstance(deps, str) else deps) if d not in omitted]
            if deps:
                r["DependsOn"] = deps
            else:
                del r["DependsOn"]
        res[lid] = rewrite(r)
    body["Outputs"] = rewrite(body.get("Outputs", {}))
    skipped = {lid: r["Type"] for lid, r in cfn["Resources"].items() if lid in active and r["Type"] in EXPECTED_SKIPS}
    return body, skipped, {lid: t for lid, t in omitted.items() if lid in active}


# --------------------------------------------------------------------------- deploy
def clients(endpoint: str) -> dict:
    def c(name: str):
        return boto3.client(name, endpoint_url=endpoint, region_name=REGION)

    return {n: c(n) for n in ("cloudformation", "s3", "ec2", "secretsmanager", "dynamodb", "sqs",
                              "lambda", "events", "iam", "ecs", "logs", "sns", "rds")}


SENTINELS = {
    "runtime": "sentinel-runtime-pw-7f3a",
    "admin": "sentinel-admin-pw-91c2",
    "slack": "xoxb-sentinel-slack-5d1e",
    "smtp": "sentinel-smtp-pw-c0de",
}


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
    rtb = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    sg = ec2.create_security_group(GroupName="toki-existing", Description="existing app group", VpcId=vpc)["GroupId"]

    sm = cl["secretsmanager"]

    def secret(name: str, body: dict) -> str:
        return sm.create_secret(Name=name, SecretString=json.dumps(body))["ARN"]

    return {
        "vpc": vpc,
        "subnets": subnets,
        "rtb": rtb,
        "sg": sg,
        "runtime": secret("toki/database-runtime", {"username": "toki_runtime", "password": SENTINELS["runtime"]}),
        "admin": secret("toki/database-admin", {"username": "postgres", "password": SENTINELS["admin"]}),
        "slack": secret("toki/slack", {"slack_token": SENTINELS["slack"]}),
        "smtp": secret("toki/smtp", {"smtp_url": f"smtps://u:{SENTINELS['smtp']}@email-smtp.eu-west-1.amazonaws.com:465"}),
    }


def params(values: dict) -> list[dict]:
    return [{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()]


def deploy(cl: dict, name: str, body: str, parameters: dict) -> dict:
    cf = cl["cloudformation"]
    cf.create_stack(StackName=name, TemplateBody=body, Parameters=params(parameters),
                    Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"])
    return wait(cf, name)


def wait(cf, name: str) -> dict:
    deadline = time.time() + 120
    while True:
        stack = cf.describe_stacks(StackName=name)["Stacks"][0]
        if not stack["StackStatus"].endswith("_IN_PROGRESS") or time.time() > deadline:
            return stack
        time.sleep(0.5)


def report_stack(cl: dict, name: str, cfn: dict, conds: dict, skipped: dict, omitted: dict, stack: dict) -> dict:
    status = stack["StackStatus"]
    # (moto also lists an entry without a logical id; not a resource of the template)
    created = {r["LogicalResourceId"]: r for r in
               cl["cloudformation"].list_stack_resources(StackName=name)["StackResourceSummaries"] if r["LogicalResourceId"]}
    active = {lid for lid, r in cfn["Resources"].items() if conds.get(r.get("Condition", ""), True)}
    check(status == "CREATE_COMPLETE", f"stack {name}: {status}", stack.get("StackStatusReason", ""))
    off = len(cfn["Resources"]) - len(active)
    print(f"        {len(created)} resources created, {len(skipped)} skipped by moto, "
          f"{len(omitted)} omitted, {off} off by condition")
    by_type: dict[str, list[str]] = {}
    for lid, t in skipped.items():
        by_type.setdefault(t, []).append(lid)
    for t, lids in sorted(by_type.items()):
        print(f"        skipped {t} x{len(lids)} ({EXPECTED_SKIPS[t]}): {', '.join(sorted(lids))}")
    for lid, t in sorted(omitted.items()):
        print(f"        omitted {t} ({EMULATOR_OMITS[t]}): {lid}")
    missing = sorted(active - set(created) - set(skipped) - set(omitted))
    check(not missing, f"stack {name}: every other active resource created", ", ".join(missing))
    unexpected = sorted(set(created) - active)
    check(not unexpected, f"stack {name}: nothing created whose condition is off", ", ".join(unexpected))
    return {o["OutputKey"]: o.get("OutputValue") for o in stack.get("Outputs", [])}


# --------------------------------------------------------------------------- checks
def check_store(cl: dict, index: str, directory: str, queue: str, dlq: str, protected: bool) -> tuple[str, str]:
    """The tables and queues of the contract, whoever created them (stack or init-aws.sh)."""
    ddb, sqs = cl["dynamodb"], cl["sqs"]
    t = ddb.describe_table(TableName=index)["Table"]
    keys = {k["AttributeName"]: k["KeyType"] for k in t["KeySchema"]}
    gsis = {g["IndexName"]: g for g in t.get("GlobalSecondaryIndexes", [])}
    g = gsis.get("by_schedule", {})
    gkeys = {k["AttributeName"]: k["KeyType"] for k in g.get("KeySchema", [])}
    check(keys == {"pk": "HASH", "sk": "RANGE"}
          and gkeys == {"sched": "HASH", "sk": "RANGE"}
          and g.get("Projection", {}).get("ProjectionType") == "KEYS_ONLY"
          and t.get("BillingModeSummary", {}).get("BillingMode") == "PAY_PER_REQUEST",
          f"{index}: pk/sk, GSI by_schedule(sched, sk) KEYS_ONLY, on-demand",
          json.dumps({"keys": keys, "gsi": gkeys, "projection": g.get("Projection")}))
    d = ddb.describe_table(TableName=directory)["Table"]
    check([k["AttributeName"] for k in d["KeySchema"]] == ["tenant"], f"{directory}: partition key tenant")
    if protected:
        check(t.get("DeletionProtectionEnabled") is True and d.get("DeletionProtectionEnabled") is True,
              f"{index}, {directory}: deletion protection on")

    qurl = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    durl = sqs.get_queue_url(QueueName=dlq)["QueueUrl"]
    qa = sqs.get_queue_attributes(QueueUrl=qurl, AttributeNames=["All"])["Attributes"]
    da = sqs.get_queue_attributes(QueueUrl=durl, AttributeNames=["All"])["Attributes"]
    redrive = json.loads(qa.get("RedrivePolicy", "{}"))
    check(qa.get("VisibilityTimeout") == "60" and qa.get("ReceiveMessageWaitTimeSeconds") == "20"
          and redrive.get("deadLetterTargetArn") == da.get("QueueArn")
          and int(redrive.get("maxReceiveCount", 0)) == 100,
          f"{queue}: visibility 60, wait 20, redrive to DLQ after 5", json.dumps(qa))
    check(da.get("MessageRetentionPeriod") == "1209600", f"{dlq}: retention 14 days")
    return qurl, durl


def policy_statements(iam, role: str) -> list[dict]:
    out: list[dict] = []
    for pn in iam.list_role_policies(RoleName=role)["PolicyNames"]:
        doc = iam.get_role_policy(RoleName=role, PolicyName=pn)["PolicyDocument"]
        if isinstance(doc, str):  # moto returns the CloudFormation dict as its Python repr
            try:
                doc = json.loads(doc)
            except ValueError:
                doc = ast.literal_eval(doc)
        for st in doc["Statement"]:
            if st is None:  # AWS::NoValue in a list: moto keeps a null, CloudFormation drops it
                continue
            a, r = st["Action"], st.get("Resource", [])
            out.append({"actions": {a} if isinstance(a, str) else set(a),
                        "resources": [r] if isinstance(r, str) else list(r),
                        "condition": st.get("Condition")})
    return out


def actions(sts: list[dict]) -> set[str]:
    return set().union(*(s["actions"] for s in sts)) if sts else set()


def resources_for(sts: list[dict], action: str) -> set[str]:
    return {r for s in sts if action in s["actions"] for r in s["resources"]}


def check_stack(cl: dict, v: dict, outputs: dict, pre: dict) -> None:
    lam, iam, ecs, events, ec2 = (cl[n] for n in ("lambda", "iam", "ecs", "events", "ec2"))
    env, aurora, full = v["env"], v["mode"] == "aurora", v["full"]
    index = f"toki-{env}-reminders"
    directory = f"toki-{env}-tenants"
    queue = f"toki-{env}-reminders"
    dlq = f"toki-{env}-reminders-dlq"
    stack_res = {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in
                 cl["cloudformation"].list_stack_resources(StackName=v["stack"])["StackResourceSummaries"] if r["LogicalResourceId"]}
    app_sg = pre["sg"] if full else stack_res.get("AppSecurityGroup")
    host = f"{SKIPPED}DatabaseProxy.Endpoint" if aurora else "db.example.internal"
    port = "5432" if aurora else "6432"
    runtime = f"{SKIPPED}RuntimeSecret" if aurora else pre["runtime"]
    admin = f"{SKIPPED}DatabaseCluster.MasterUserSecret.SecretArn" if aurora else pre["admin"]

    want_outputs = {"IndexTableName", "DirectoryTableName", "QueueUrl", "DlqUrl", "QueueName", "DlqName", "RegistrarApiUrl",
                    "MigrateTaskDefinition", "RunTaskNetworkConfiguration", "ApplicationSecurityGroupId", "DatabaseHost",
                    "DaemonLogGroupName", "MigrateLogGroupName"}
    check(want_outputs <= set(outputs), "outputs: names, URLs, migrate task, run-task network, database host",
          f"missing {sorted(want_outputs - set(outputs))}")
    check(outputs.get("IndexTableName") == index and outputs.get("QueueName") == queue
          and outputs.get("MigrateTaskDefinition") == f"toki-{env}-migrate"
          and outputs.get("ApplicationSecurityGroupId") == app_sg and outputs.get("DatabaseHost") == host,
          "output values match the contract", json.dumps(outputs))
    net = outputs.get("RunTaskNetworkConfiguration", "")
    check(net == f"awsvpcConfiguration={{subnets=[{','.join(pre['subnets'])}],securityGroups=[{app_sg}],"
                 f"assignPublicIp={'ENABLED' if full else 'DISABLED'}}}",
          "RunTaskNetworkConfiguration: the stack's subnets and application group", net)

    qurl, durl = check_store(cl, index, directory, queue, dlq, protected=True)
    # moto answers Ref with the canonical https://sqs.<region>... URL, get_queue_url with its own host.
    check(str(outputs.get("QueueUrl")).endswith(qurl.split("/", 3)[3]) and str(outputs.get("DlqUrl")).endswith(durl.split("/", 3)[3]),
          "QueueUrl/DlqUrl outputs name the queues", f"{outputs.get('QueueUrl')} vs {qurl}")

    # ---- Lambdas
    base = {"TOKI_BACKEND", "TOKI_INDEX_TABLE", "TOKI_DIRECTORY_TABLE", "TOKI_QUEUE_NAME", "TOKI_DLQ_NAME", "TOKI_SHARDS", "TOKI_LEAD_MS", "RUST_LOG"}
    db_env = {"TOKI_DATABASE_HOST": host, "TOKI_DATABASE_PORT": port, "TOKI_DATABASE_SECRET_ARN": runtime,
              "TOKI_DATABASE_SSLMODE": "verify-full"}
    if full:
        db_env["TOKI_DATABASE_SSLROOTCERT"] = "/etc/ssl/certs/rds-global-bundle.pem"
    confs = {}
    for fn in ("scanner", "registrar", "repair"):
        conf = lam.get_function_configuration(FunctionName=f"toki-{env}-{fn}")
        confs[fn] = conf
        envv = conf.get("Environment", {}).get("Variables", {})
        check(conf["Runtime"] == "provided.al2023" and conf["Handler"] == "bootstrap"
              and base <= set(envv) and envv.get("TOKI_BACKEND") == "aws"
              and envv.get("TOKI_INDEX_TABLE") == index and envv.get("TOKI_QUEUE_NAME") == queue
              and envv.get("TOKI_DLQ_NAME") == dlq,
              f"lambda toki-{env}-{fn}: provided.al2023/bootstrap, TOKI_* env", json.dumps(envv))
        reserved = lam.get_function_concurrency(FunctionName=f"toki-{env}-{fn}").get("ReservedConcurrentExecutions")
        vpc = conf.get("VpcConfig") or {}
        # (moto passes a Number parameter's Ref as a number; CloudFormation passes a string)
        db = {k: str(v2) for k, v2 in envv.items() if k.startswith("TOKI_DATABASE")}
        if fn == "scanner":
            check(envv.get("TOKI_CLAIM_LEASE_S") == "180" and conf.get("Timeout") == 60 and reserved == 2,
                  "scanner: TOKI_CLAIM_LEASE_S=180 (> timeout 60), reserved concurrency 2",
                  json.dumps({"lease": envv.get("TOKI_CLAIM_LEASE_S"), "timeout": conf.get("Timeout"), "reserved": reserved}))
            check(not vpc.get("SubnetIds") and not db, "scanner: outside the VPC, no database settings",
                  json.dumps({"vpc": vpc, "db": db}))
        else:
            check(sorted(vpc.get("SubnetIds", [])) == sorted(pre["subnets"]) and vpc.get("SecurityGroupIds") == [app_sg],
                  f"{fn}: in the VPC (stack subnets, application group {'passed' if full else 'created'})", json.dumps(vpc))
            check(db == db_env, f"{fn}: database env ({'existing server + CA bundle' if full else 'RDS Proxy endpoint'}, "
                  "runtime secret ARN, verify-full), no admin secret", json.dumps(db))
        if fn == "repair":
            check(conf.get("Timeout") == 60 and reserved == 1, "repair: timeout 60, reserved concurrency 1",
                  json.dumps({"timeout": conf.get("Timeout"), "reserved": reserved}))
            bounds = {k: int(envv.get(f"TOKI_REPAIR_{k}", "0")) for k in ("CONCURRENCY", "TENANT_DEADLINE_S", "PASS_BUDGET_S")}
            check(bounds["CONCURRENCY"] >= 1 and 1 <= bounds["TENANT_DEADLINE_S"] <= bounds["PASS_BUDGET_S"]
                  and bounds["PASS_BUDGET_S"] + 5 < conf.get("Timeout", 0),
                  "repair: TOKI_REPAIR_* set, tenant deadline <= pass budget, pass budget + 5 s margin < timeout",
                  json.dumps(bounds))

    rules = events.list_rules()["Rules"]
    for fn in ("scanner", "repair"):
        arn = confs[fn]["FunctionArn"]
        ticking = [r for r in rules if r.get("ScheduleExpression") == "rate(1 minute)" and any(
            tg["Arn"] == arn for tg in events.list_targets_by_rule(Rule=r["Name"])["Targets"])]
        check(len(ticking) == 1, f"EventBridge rule rate(1 minute) -> {fn}")

    # ---- IAM: exactly the secrets each component uses
    role = {n: policy_statements(iam, f"toki-{env}-{n}") for n in
            ("scanner", "registrar", "repair", "daemon-task", "daemon-execution", "migrate-task")}
    get = "secretsmanager:GetSecretValue"
    table_arn = cl["dynamodb"].describe_table(TableName=directory)["Table"]["TableArn"]
    index_arn = cl["dynamodb"].describe_table(TableName=index)["Table"]["TableArn"]
    scanner = actions(role["scanner"])
    check({"dynamodb:Query", "dynamodb:UpdateItem", "sqs:SendMessage"} <= scanner
          and resources_for(role["scanner"], "dynamodb:Query") == {index_arn}
          and resources_for(role["scanner"], "dynamodb:GetItem") == {table_arn}
          and not any(a.startswith("secretsmanager:") or a in ("sqs:ReceiveMessage", "sqs:DeleteMessage") for a in scanner),
          "scanner role: index Query/UpdateItem, contract GetItem, SendMessage, no secrets, no receive",
          str(sorted(scanner)))
    # Which calls each component makes, on which resources, is enforced by the
    # IAM gate's test (infra/iam_gate.py, tests/least_privilege.rs); here the
    # deployed shape: the GSI is read through its own ARN, no batch writes.
    # The repair also reads the work marks due (W#..., a Query on the table).
    queried = {"registrar": {f"{index_arn}/index/by_schedule"},
               "repair": {f"{index_arn}/index/by_schedule", index_arn}}
    for fn in ("registrar", "repair"):
        acts = actions(role[fn])
        check({"dynamodb:PutItem", "dynamodb:Query", "sqs:SendMessage"} <= acts
              and "dynamodb:BatchWriteItem" not in acts
              and resources_for(role[fn], "dynamodb:Query") == queried[fn]
              and "sqs:ReceiveMessage" not in acts and resources_for(role[fn], get) == {runtime},
              f"{fn} role: index writes, Query on the GSI (repair: and on the work marks), SendMessage, GetSecretValue on the runtime secret only",
              json.dumps({"actions": sorted(acts), "secrets": sorted(resources_for(role[fn], get))}))
    check(resources_for(role["repair"], "dynamodb:Scan") == {table_arn}
          and "dynamodb:Scan" not in actions(role["registrar"]),
          "repair role: Scan on the tenant directory (registrar: none)")
    daemon = actions(role["daemon-task"])
    check({"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"} <= daemon
          and resources_for(role["daemon-task"], get) == {runtime},
          "daemon task role: queue consume, runtime secret", str(sorted(daemon)))
    # The daemon's rows in the index table, under keys of their own: debounce
    # checks (D#...), partition leases (L#..., also read by Query) and work
    # marks (W#...: events to send, read by Query), and reads the schedules'
    # version markers (V#...: BatchGetItem, the last look); it may touch those rows
    # and nothing else there. In the tenant directory it reads each tenant's
    # contract (flow limits; /readyz): GetItem, and BatchGetItem for a
    # burst's tenants together; no Scan, no write.
    dynamo = [s for s in role["daemon-task"] if any(a.startswith("dynamodb:") for a in s["actions"])
              and s["resources"] != [table_arn]]
    check(resources_for(role["daemon-task"], "dynamodb:GetItem") == {index_arn, table_arn}
          and {a for s in role["daemon-task"] if table_arn in s["resources"] for a in s["actions"]}
          == {"dynamodb:GetItem", "dynamodb:BatchGetItem"},
          "daemon task role: GetItem and BatchGetItem on the tenant directory (contracts), no Scan, no write")
    leading = [((s["condition"] or {}).get("ForAllValues:StringLike") or {}).get("dynamodb:LeadingKeys") for s in dynamo]
    by_keys: dict[str, set[str]] = {}
    for s, k in zip(dynamo, leading):
        k = "unconditioned" if k is None else ",".join([k] if isinstance(k, str) else k)
        by_keys[k] = by_keys.get(k, set()) | s["actions"]
    check(by_keys == {"D#*": {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"},
                      "L#*": {"dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:Query"},
                      "W#*": {"dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:Query"},
                      "V#*": {"dynamodb:BatchGetItem"}}
          and all(s["resources"] == [index_arn] for s in dynamo),
          "daemon task role: DynamoDB on the index table only on its debounce rows (D#*: Get/Put/DeleteItem) "
          "lease rows (L#*: PutItem, DeleteItem, Query), work marks (W#*: UpdateItem, DeleteItem, Query) "
          "and version markers (V#*: BatchGetItem)",
          json.dumps({k: sorted(v) for k, v in by_keys.items()}))
    want_exec = {pre["slack"], pre["smtp"]} if full else set()
    check(resources_for(role["daemon-execution"], get) == want_exec,
          f"daemon execution role: GetSecretValue on {'the Slack and SMTP secrets' if full else 'nothing'} (no database secret)",
          str(sorted(resources_for(role["daemon-execution"], get))))
    queue_arn = cl["sqs"].get_queue_attributes(QueueUrl=qurl, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    dlq_arn = cl["sqs"].get_queue_attributes(QueueUrl=durl, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    check(resources_for(role["daemon-task"], "sqs:ReceiveMessage") == {queue_arn}, "daemon task role: receives from the queue only")
    check(resources_for(role["daemon-task"], "sqs:GetQueueAttributes") == {queue_arn, dlq_arn},
          "daemon task role: GetQueueAttributes on the queue and the DLQ (depth: /metrics, /readyz)")
    mig = role["migrate-task"]
    check(resources_for(mig, "sqs:ReceiveMessage") == {dlq_arn} and resources_for(mig, "sqs:DeleteMessage") == {dlq_arn}
          and resources_for(mig, "sqs:SendMessage") == {queue_arn},
          "migrate task role (toki redrive): receive/delete on the DLQ, send to the queue")
    check(resources_for(mig, get) == {runtime, admin}
          and {"dynamodb:Scan", "dynamodb:GetItem"} <= actions(mig)
          and resources_for(mig, "dynamodb:Scan") == {table_arn}
          and all(s["actions"] == {"dynamodb:UpdateItem"}
                  and ((s["condition"] or {}).get("ForAllValues:StringLike") or {}).get("dynamodb:LeadingKeys") in ("W#*", ["W#*"])
                  for s in mig if index_arn in s["resources"]),
          "migrate task role: admin + runtime secrets, Scan/GetItem on the directory, on the index only UpdateItem of work marks (W#*)",
          json.dumps({"secrets": sorted(resources_for(mig, get)), "actions": sorted(actions(mig))}))
    # tenant create / key create --key-secret: the new API key goes to a
    # secret under toki/<env>/tenant-keys/, written by the migrate task alone,
    # which cannot read it back.
    part, acct = table_arn.split(":")[1], table_arn.split(":")[4]
    key_secrets = f"arn:{part}:secretsmanager:{REGION}:{acct}:secret:toki/{env}/tenant-keys/*"
    writes = ("secretsmanager:CreateSecret", "secretsmanager:PutSecretValue")
    others = {n: sorted(a for a in actions(sts) if a.startswith("secretsmanager:") and a != get)
              for n, sts in role.items() if n != "migrate-task"}
    check(all(resources_for(mig, a) == {key_secrets} for a in writes)
          and {a for a in actions(mig) if a.startswith("secretsmanager:")} == {get, *writes}
          and key_secrets not in resources_for(mig, get)
          and not any(others.values()),
          f"migrate task role: CreateSecret/PutSecretValue on toki/{env}/tenant-keys/* only (no read of them); "
          "no other role writes a secret",
          json.dumps({w: sorted(resources_for(mig, w)) for w in writes} | {"others": others}))
    if aurora:
        proxy = policy_statements(iam, f"toki-{env}-db-proxy")
        check(resources_for(proxy, get) == {runtime, admin}, "RDS Proxy role: the runtime and admin secrets",
              str(sorted(resources_for(proxy, get))))

    # ---- ECS
    svc = ecs.describe_services(cluster=f"toki-{env}", services=[f"toki-{env}-daemon"])["services"]
    check(bool(svc) and svc[0]["desiredCount"] == (3 if full else 2), f"ECS service toki-{env}-daemon desired count",
          json.dumps(svc[0]["desiredCount"] if svc else None))

    def container(family: str) -> dict:
        tds = ecs.list_task_definitions(familyPrefix=family)["taskDefinitionArns"]
        return ecs.describe_task_definition(taskDefinition=tds[-1])["taskDefinition"]["containerDefinitions"][0] if tds else {}

    task_db = {**db_env}
    cd = container(f"toki-{env}-daemon")
    envs = {e["name"]: e["value"] for e in cd.get("environment", []) if e}
    secrets = {s["name"] for s in (cd.get("secrets") or []) if s}
    want_secrets = {"TOKI_SLACK_TOKEN", "TOKI_SMTP_URL"} if full else set()
    workers = "16" if full else "8"
    check(cd.get("command") == ["--workers", workers] and envs.get("TOKI_WORKERS") == workers
          and envs.get("TOKI_BACKEND") == "aws" and envs.get("TOKI_QUEUE_NAME") == queue,
          f"daemon task: --workers {workers}, TOKI_* env", json.dumps({"command": cd.get("command"), "env": envs}))
    check({k: x for k, x in envs.items() if k.startswith("TOKI_DATABASE")} == task_db,
          "daemon task: database env (host, port, runtime secret ARN, verify-full), no admin secret")
    check(secrets == want_secrets, f"daemon task secrets: {', '.join(sorted(want_secrets)) or 'none'} (no database secret)",
          str(sorted(secrets)))
    check(cd.get("healthCheck") == HEALTH_CHECK, "daemon task: health check toki-daemon healthcheck (15/5/3/30)",
          json.dumps(cd.get("healthCheck")))
    check(envs.get("TOKI_METRICS_LISTEN") == "127.0.0.1:9464" and envs.get("TOKI_EMF_EVERY_S") == "60",
          "daemon task: /metrics, /healthz (the health check) on 127.0.0.1:9464; lateness EMF every 60 s")
    md = container(f"toki-{env}-migrate")
    menv = {e["name"]: e["value"] for e in md.get("environment", []) if e}
    check(md.get("entryPoint") == ["/usr/bin/env"] and md.get("command") == ["toki", "migrate"]
          and md.get("image") == (v["params"].get("MigrateImageUri") or cd.get("image")),
          f"task toki-{env}-migrate: {'MigrateImageUri' if full else 'the daemon image'}, command toki migrate (overridable)",
          json.dumps({"entryPoint": md.get("entryPoint"), "command": md.get("command")}))
    check({k: x for k, x in menv.items() if k.startswith("TOKI_DATABASE")} == {**task_db, "TOKI_DATABASE_ADMIN_SECRET_ARN": admin}
          and menv.get("TOKI_BACKEND") == "aws" and menv.get("TOKI_DIRECTORY_TABLE") == directory
          and menv.get("TOKI_QUEUE_NAME") == queue and not md.get("secrets"),
          "migrate task: TOKI_* tables/queue, database env + admin secret ARN, no injected secrets", json.dumps(menv))

    # ---- network
    sgs = {g["GroupId"]: g for g in ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [pre["vpc"]]}])["SecurityGroups"]}

    def admits(group: str | None, port_: int, source: str | None) -> bool:
        g = sgs.get(group or "", {})
        return any(p.get("FromPort") == port_ and p.get("ToPort") == port_
                   and any(u.get("GroupId") == source for u in p.get("UserIdGroupPairs", []))
                   for p in g.get("IpPermissions", []))

    check(("AppSecurityGroup" in stack_res) == (not full), f"application security group {'passed in' if full else 'created'}")
    endpoints = {k: x for k, x in stack_res.items() if k.endswith("Endpoint") and k != "EndpointSecurityGroup"}
    if full:
        check(not endpoints and "EndpointSecurityGroup" not in stack_res, "CreateVpcEndpoints=false: no endpoints")
    else:
        eps = ec2.describe_vpc_endpoints(VpcEndpointIds=list(endpoints.values()))["VpcEndpoints"] if endpoints else []
        # com.amazonaws.<region>.<service>
        kinds = {(e["ServiceName"].split(f"{REGION}.", 1)[1], e["VpcEndpointType"]) for e in eps}
        want = {("dynamodb", "Gateway"), ("s3", "Gateway"), ("sqs", "Interface"), ("secretsmanager", "Interface"),
                ("logs", "Interface"), ("ecr.api", "Interface"), ("ecr.dkr", "Interface")}
        check(kinds == want, "VPC endpoints: DynamoDB + S3 gateway, SQS, Secrets Manager, Logs, ECR api/dkr interface",
              str(sorted(kinds)))
        gw = [e for e in eps if e["VpcEndpointType"] == "Gateway"]
        check(all(e.get("RouteTableIds") == [pre["rtb"]] for e in gw), "gateway endpoints on RouteTableIds",
              json.dumps([e.get("RouteTableIds") for e in gw]))
        check(admits(stack_res.get("EndpointSecurityGroup"), 443, app_sg), "endpoint group admits 443 from the application group")
    if aurora:
        check(admits(stack_res.get("ProxySecurityGroup"), 5432, app_sg)
              and len(sgs.get(stack_res.get("ProxySecurityGroup", ""), {}).get("IpPermissions", [])) == 1,
              "RDS Proxy group admits 5432 from the application group only")
        check(admits(stack_res.get("DatabaseSecurityGroup"), 5432, stack_res.get("ProxySecurityGroup"))
              and admits(stack_res.get("DatabaseSecurityGroup"), 5432, app_sg),
              "cluster group admits 5432 from RDS Proxy and the application group")
        sng = cl["rds"].describe_db_subnet_groups(DBSubnetGroupName=f"toki-{env}")["DBSubnetGroups"][0]
        check(sorted(s["SubnetIdentifier"] for s in sng["Subnets"]) == sorted(pre["subnets"]),
              f"DB subnet group toki-{env} on the stack subnets")
    else:
        check(not any(k in stack_res for k in ("DatabaseSubnetGroup", "ProxySecurityGroup", "DatabaseSecurityGroup", "ProxyRole")),
              "DatabaseMode=existing: no database resources")


def check_template(cfn: dict) -> None:
    """Properties of resources moto skips, read from the expanded template."""
    r = cfn["Resources"]
    p = {k: x.get("Properties", {}) for k, x in r.items()}
    c = p["DatabaseCluster"]
    check(c.get("Engine") == "aurora-postgresql" and c.get("ManageMasterUserPassword") is True
          and "MasterUserPassword" not in c and {"MinCapacity", "MaxCapacity"} <= set(c.get("ServerlessV2ScalingConfiguration", {}))
          and p["DatabaseInstance"].get("DBInstanceClass") == "db.serverless"
          and r["DatabaseCluster"].get("Condition") == "IsAurora",
          "template: Aurora PostgreSQL Serverless v2, one db.serverless instance, RDS-managed admin secret (aurora only)")
    gen = p["RuntimeSecret"].get("GenerateSecretString", {})
    check(json.loads(gen.get("SecretStringTemplate", "{}")) == {"username": "toki_runtime"} and gen.get("GenerateStringKey") == "password",
          "template: runtime secret generated ({\"username\":\"toki_runtime\"} + password)")
    px = p["DatabaseProxy"]
    auth = [a.get("SecretArn") for a in px.get("Auth", [])]
    check(px.get("RequireTLS") is True and px.get("EngineFamily") == "POSTGRESQL"
          and {"Ref": "RuntimeSecret"} in auth and {"Fn::GetAtt": ["DatabaseCluster", "MasterUserSecret.SecretArn"]} in auth,
          "template: RDS Proxy requires TLS, authenticates with both secrets", json.dumps(auth))
    settings = p["DaemonCluster"].get("ClusterSettings", [])
    check({"Name": "containerInsights", "Value": "enabled"} in settings, "template: Container Insights on (RunningTaskCount)")
    tt = p["DaemonScalingPolicy"].get("TargetTrackingScalingPolicyConfiguration", {})
    metrics = {m["Id"]: m for m in tt.get("CustomizedMetricSpecification", {}).get("Metrics", [])}
    names = {i: m.get("MetricStat", {}).get("Metric", {}).get("MetricName") for i, m in metrics.items()}
    check(tt.get("TargetValue") == {"Ref": "BacklogPerTask"}
          and names.get("visible") == "ApproximateNumberOfMessagesVisible"
          and names.get("delayed") == "ApproximateNumberOfMessagesDelayed"
          and names.get("inflight") == "ApproximateNumberOfMessagesNotVisible"
          and names.get("tasks") == "RunningTaskCount"
          and metrics.get("backlog_per_task", {}).get("Expression") == "(visible + delayed + inflight) / tasks",
          "template: target tracking on (visible + delayed + in flight) / RunningTaskCount = BacklogPerTask", json.dumps(names))
    st = p["DaemonScalableTarget"]
    peak = st.get("ScheduledActions", {}).get("Fn::If", [None, []])
    acts = peak[1] if peak[0] == "HasPeakSchedule" else []
    check(len(acts) == 2 and all(a.get("Schedule") == {"Ref": "PeakScaleCron"} for a in acts)
          and [a.get("Timezone") for a in acts] == ["Etc/UTC", "Etc/GMT+1"]
          and acts[0]["ScalableTargetAction"] == {"MinCapacity": {"Ref": "PeakMinCapacity"}}
          and acts[1]["ScalableTargetAction"] == {"MinCapacity": {"Ref": "MinCapacity"}}
          and st.get("MinCapacity") == {"Ref": "MinCapacity"} and st.get("MaxCapacity") == {"Ref": "MaxCapacity"},
          "template: MinCapacity/MaxCapacity; PeakScaleCron raises MinCapacity, the same cron an hour later (Etc/GMT+1) lowers it")
    alarms = {(x.get("Namespace"), x.get("MetricName"), json.dumps(x.get("Dimensions"))) for x in p.values() if "MetricName" in x}
    # The Lambdas' metrics carry the stack's environment (TOKI_ENVIRONMENT) and the function.
    env_dim = {"Name": "Environment", "Value": {"Ref": "EnvironmentName"}}
    check(("Toki", "FailedPartitions", json.dumps([env_dim, {"Name": "Function", "Value": "scanner"}])) in alarms
          and ("Toki", "RepairFailed", json.dumps([env_dim, {"Name": "Function", "Value": "repair"}])) in alarms
          and sum(1 for a in alarms if a[1] == "Errors") == 3,
          "template: alarms on Toki/FailedPartitions (scanner), Toki/RepairFailed, Errors of all three Lambdas")
    late = p.get("LatenessAlarm", {})
    check(late.get("Namespace") == "Toki" and late.get("MetricName") == "LatenessMs"
          and late.get("ExtendedStatistic") == "p99" and late.get("Dimensions") == [env_dim]
          and late.get("Threshold") == {"Ref": "LatenessAlarmMs"},
          "template: alarm on the p99 of Toki/LatenessMs (the daemons' EMF) above LatenessAlarmMs", json.dumps(late))
    # The dashboard's body is JSON once !Sub has filled it in: check it parses
    # and shows lateness, the queue, dead letters and the alarms.
    sub_ = p.get("Dashboard", {}).get("DashboardBody", {}).get("Fn::Sub", ["", {}])
    body = re.sub(r"\$\{LatenessAlarmMs\}", "5000", sub_[0])
    body = re.sub(r"\$\{[^}]+\}", "x", body)
    try:
        widgets = json.loads(body)["widgets"]
    except (ValueError, KeyError) as e:
        widgets = []
        fail(f"template: the dashboard body is not JSON: {e}")
    shown = json.dumps(widgets)
    check(len(widgets) >= 6 and all(m in shown for m in ("LatenessMs", "ApproximateNumberOfMessagesVisible", "FailedPartitions", '"type": "alarm"')),
          f"template: a CloudWatch dashboard of {len(widgets)} widgets (lateness, queue, dead letters, scanner, alarms)")
    retained = [k for k, x in r.items() if x["Type"] in ("AWS::SQS::Queue", "AWS::Logs::LogGroup", "AWS::DynamoDB::Table")]
    check(all(r[k].get("DeletionPolicy") == "Retain" and r[k].get("UpdateReplacePolicy") == "Retain" for k in retained),
          f"template: DeletionPolicy/UpdateReplacePolicy Retain on {len(retained)} queues, log groups and tables")
    # (moto ignores ManagedPolicyArns and the Rules section)
    vpc_access = {k for k in ("ScannerRole", "RegistrarRole", "RepairRole")
                  if "AWSLambdaVPCAccessExecutionRole" in json.dumps(p[k].get("ManagedPolicyArns", []))}
    check(vpc_access == {"RegistrarRole", "RepairRole"}, "template: VPC access policy on the registrar and repair roles only",
          str(sorted(vpc_access)))
    check({"ExistingDatabaseIsNamed", "GatewayEndpointsNeedRouteTables"} <= set(cfn.get("Rules", {})),
          "template: Rules require the existing-database parameters and RouteTableIds")
    text = json.dumps(cfn)
    check("{{resolve:" not in text and "DATABASE_URL" not in text and '"MasterUserPassword"' not in text,
          "template: no dynamic secret reference, no database URL, no literal password")


def check_no_secret_values(cl: dict, bodies: list[str]) -> None:
    """No secret value in any template, Lambda configuration, task definition, output or parameter."""
    lam, ecs, cf = cl["lambda"], cl["ecs"], cl["cloudformation"]
    blobs = list(bodies)
    for f in lam.list_functions()["Functions"]:
        blobs.append(json.dumps(lam.get_function_configuration(FunctionName=f["FunctionName"]), default=str))
    for arn in ecs.list_task_definitions()["taskDefinitionArns"]:
        blobs.append(json.dumps(ecs.describe_task_definition(taskDefinition=arn)["taskDefinition"], default=str))
    for s in cf.describe_stacks()["Stacks"]:
        blobs.append(json.dumps({"p": s.get("Parameters"), "o": s.get("Outputs")}, default=str))
    leaked = sorted({name for name, value in SENTINELS.items() for b in blobs if value in b})
    check(not leaked, f"no secret value in the templates, {len(blobs) - len(bodies)} Lambda/task/stack descriptions",
          f"found the {', '.join(leaked)} secret")


def check_retained(cl: dict, name: str, env: str) -> None:
    """Delete the stack; what holds reminders or their history must stay."""
    cf = cl["cloudformation"]
    cf.delete_stack(StackName=name)
    deadline = time.time() + 120
    while time.time() < deadline:
        live = [s for s in cf.list_stacks()["StackSummaries"] if s["StackName"] == name and s["StackStatus"] != "DELETE_COMPLETE"]
        if not live or not live[0]["StackStatus"].endswith("_IN_PROGRESS"):
            break
        time.sleep(0.5)
    check(not live, f"stack {name}: deleted", json.dumps([s["StackStatus"] for s in live]))
    tables = set(cl["dynamodb"].list_tables()["TableNames"])
    queues = {u.rsplit("/", 1)[1] for u in cl["sqs"].list_queues(QueueNamePrefix=f"toki-{env}-").get("QueueUrls", [])}
    groups = {g["logGroupName"] for g in cl["logs"].describe_log_groups()["logGroups"] if f"toki-{env}-" in g["logGroupName"]}
    want_groups = {f"/aws/lambda/toki-{env}-{f}" for f in ("scanner", "registrar", "repair")} | {
        f"/aws/http-api/toki-{env}-registrar", f"/ecs/toki-{env}-daemon", f"/ecs/toki-{env}-migrate"}
    functions = [f["FunctionName"] for f in cl["lambda"].list_functions()["Functions"] if f["FunctionName"].startswith(f"toki-{env}-")]
    check({f"toki-{env}-reminders", f"toki-{env}-tenants"} <= tables
          and {f"toki-{env}-reminders", f"toki-{env}-reminders-dlq"} <= queues and want_groups <= groups,
          "after deletion: both tables, both queues and all 6 log groups remain",
          json.dumps({"tables": sorted(tables), "queues": sorted(queues), "groups": sorted(groups)}))
    check(not functions, "after deletion: the Lambdas are gone (the deletion did run)", str(functions))


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
                    os.environ.get("TOKI_DLQ_NAME") or "toki-reminders-dlq", protected=False)
        ttl = cl["dynamodb"].describe_time_to_live(TableName=index)["TimeToLiveDescription"]
        check(ttl.get("TimeToLiveStatus") == "ENABLED" and ttl.get("AttributeName") == "expires_at",
              f"{index}: TTL on expires_at", json.dumps(ttl))
        return 1 if FAILURES else 0

    template = Path(args.template)
    sam_count = len(yaml_parse(template.read_text())["Resources"])
    expanded = expand(template)
    if args.expanded_out:
        Path(args.expanded_out).write_text(json.dumps(expanded, indent=1))
    print(f"SAM expansion: {sam_count} template resources -> {len(expanded['Resources'])} CloudFormation resources")
    check_template(expanded)

    cl = clients(args.endpoint)
    pre = prerequisites(cl)
    common = {
        "DaemonImageUri": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/toki-daemon:check",
        "VpcId": pre["vpc"],
        "SubnetIds": ",".join(pre["subnets"]),
        "MailFrom": "Toki <reminders@example.com>",
    }
    variants = [
        {"stack": "toki-check-min", "env": "chkmin", "mode": "aurora", "full": False,
         "params": {"RouteTableIds": pre["rtb"]}},
        {"stack": "toki-check-full", "env": "chkfull", "mode": "existing", "full": True, "params": {
            "DatabaseMode": "existing", "ExistingDatabaseHost": "db.example.internal", "ExistingDatabasePort": "6432",
            "ExistingDatabaseSslRootCert": "/etc/ssl/certs/rds-global-bundle.pem",
            "DatabaseRuntimeSecretArn": pre["runtime"], "DatabaseAdminSecretArn": pre["admin"],
            "SecurityGroupId": pre["sg"], "CreateVpcEndpoints": "false",
            "MigrateImageUri": "123456789012.dkr.ecr.eu-west-1.amazonaws.com/toki-daemon:next",
            "DesiredCount": "3", "MinCapacity": "3", "MaxCapacity": "12", "BacklogPerTask": "2000",
            "PeakScaleCron": "cron(45 23 ? * SUN *)", "PeakMinCapacity": "8",
            "Workers": "16", "DaemonCpu": "1024", "DaemonMemory": "2048",
            "DaemonCpuArchitecture": "ARM64", "LambdaArchitecture": "arm64",
            "AssignPublicIp": "ENABLED", "SlackTokenSecretArn": pre["slack"], "SmtpUrlSecretArn": pre["smtp"],
            "AlarmEmail": "ops@example.com",
        }},
    ]
    bodies = [json.dumps(expanded)]
    for v in variants:
        values = {**common, "EnvironmentName": v["env"], **v["params"]}
        conds = conditions(expanded, values)
        body, skipped, omitted = for_moto(expanded, conds)
        bodies.append(json.dumps(body))
        label = "every option, DatabaseMode=existing" if v["full"] else "defaults, DatabaseMode=aurora"
        print(f"\nstack {v['stack']} (EnvironmentName={v['env']}, {label})")
        stack = deploy(cl, v["stack"], json.dumps(body, indent=1), values)
        outputs = report_stack(cl, v["stack"], expanded, conds, skipped, omitted, stack)
        if stack["StackStatus"] == "CREATE_COMPLETE":
            check_stack(cl, v, outputs, pre)

    print("\nsecrets and retention")
    check_no_secret_values(cl, bodies)
    check_retained(cl, variants[0]["stack"], variants[0]["env"])

    print()
    if FAILURES:
        print(f"emulator deploy: {len(FAILURES)} check(s) FAILED")
        return 1
    print("emulator deploy: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
