#!/usr/bin/env python3
"""An IAM-enforcing gate in front of the AWS emulator (moto), for tests.

moto enforces IAM only loosely (for DynamoDB it checks actions, not which
table), so this proxy does it: every request is attributed to one role of
infra/template.yaml, its IAM action(s) and resource ARN(s) are worked out from
the request, and they are evaluated against that role's policy documents as
the template writes them (intrinsics resolved against the parameters given).
Allowed requests go to the emulator unchanged; denied ones get the service's
AccessDenied error and a line in the denial log.

Which role a request plays: the listener it came in on (--role-listener ROLE,
for components that share one process's credentials), else its SigV4 access
key id (--principal AKID=ROLE). Anything else is denied.

Usage:
  iam_gate.py --template infra/template.yaml --upstream http://127.0.0.1:5000 \
      --param EnvironmentName=x --param DatabaseMode=existing ... \
      --principal toki-daemon=DaemonTaskRole --role-listener ScannerRole \
      [--denials FILE] [--region us-east-1] [--account 123456789012]

It prints one line per listener, `iam_gate: ROLE on http://127.0.0.1:PORT`
(`*` for the principal listener), then `iam_gate: ready`. GET /__gate/denials
on any listener answers the denials so far as JSON.

What it understands, and the rest:
  - DynamoDB (JSON, X-Amz-Target DynamoDB_20120810.*): the table ARN, the
    index ARN (table/T/index/I) for Query and Scan on an index, every table of
    BatchWriteItem/BatchGetItem, each item of TransactWriteItems (PutItem,
    UpdateItem, DeleteItem, ConditionCheckItem) and TransactGetItems; the
    condition key dynamodb:LeadingKeys (partition key values, from Key, Item or
    the key condition's equality on the partition key).
  - SQS, JSON (X-Amz-Target AmazonSQS.*) and query (Action=) protocols: the
    queue ARN from QueueUrl or QueueName; a *Batch action is authorised as its
    single action (SendMessageBatch as sqs:SendMessage), as SQS does.
  - Secrets Manager (X-Amz-Target secretsmanager.*): the secret ARN (a name is
    looked up in the emulator; CreateSecret's is NAME-xxxxxx, like the random
    suffix AWS adds).
  - SES v2 (REST): SendEmail on the From address's identity (the address if the
    emulator has it as an identity, else its domain) and the configuration set,
    also as ses:SendRawEmail for raw content; GetEmailIdentity on the identity.
  - Policy evaluation: explicit Deny wins, else an Allow must match; Action and
    NotAction, Resource and NotResource with * and ? wildcards. Conditions:
    ForAllValues:StringLike / StringEquals and ForAnyValue:StringLike /
    StringEquals on dynamodb:LeadingKeys. Any other condition is not understood:
    an Allow with it grants nothing, a Deny with it applies; the denial says so.
  - Managed policies: AWSLambdaVPCAccessExecutionRole grants its EC2 network
    interface actions only; any other managed policy grants nothing.
Anything it cannot attribute to an action and resource is denied, naming why.
"""

import argparse
import base64
import email
import fnmatch
import http.client
import http.server
import json
import re
import sys
import threading
import urllib.parse

import boto3
import yaml

# ---------------------------------------------------------------- template


def _cfn_loader():
    """A YAML loader that reads CloudFormation's short forms (!Sub, !Ref, ...) as long forms."""

    class Loader(yaml.SafeLoader):
        pass

    def construct(tag):
        name = "Ref" if tag == "Ref" else ("Condition" if tag == "Condition" else "Fn::" + tag)

        def make(loader, node):
            if isinstance(node, yaml.ScalarNode):
                value = loader.construct_scalar(node)
            elif isinstance(node, yaml.SequenceNode):
                value = loader.construct_sequence(node, deep=True)
            else:
                value = loader.construct_mapping(node, deep=True)
            if name == "Fn::GetAtt" and isinstance(value, str):
                value = value.split(".", 1)
            return {name: value}

        return make

    for tag in ["Ref", "Condition", "Sub", "GetAtt", "If", "Select", "Split", "Join",
                "Equals", "And", "Or", "Not", "FindInMap", "GetAZs", "ImportValue",
                "Base64", "Cidr"]:
        Loader.add_constructor("!" + tag, construct(tag))
    return Loader


class Unresolvable(Exception):
    pass


NO_VALUE = object()


class Template:
    def __init__(self, path, params, region, account, partition="aws"):
        with open(path) as f:
            self.doc = yaml.load(f, Loader=_cfn_loader())
        self.resources = self.doc.get("Resources", {})
        self.params = {}
        for name, spec in self.doc.get("Parameters", {}).items():
            if name in params:
                self.params[name] = params[name]
            elif "Default" in spec:
                self.params[name] = spec["Default"]
        unknown = set(params) - set(self.doc.get("Parameters", {}))
        if unknown:
            raise SystemExit(f"iam_gate: not parameters of the template: {sorted(unknown)}")
        self.pseudo = {
            "AWS::Region": region,
            "AWS::AccountId": account,
            "AWS::Partition": partition,
            "AWS::StackName": "toki",
            "AWS::URLSuffix": "amazonaws.com",
        }
        self.region, self.account = region, account
        self._conditions = {}

    def condition(self, name):
        if name not in self._conditions:
            self._conditions[name] = bool(self.resolve(self.doc["Conditions"][name]))
        return self._conditions[name]

    def ref(self, name):
        if name in self.pseudo:
            return self.pseudo[name]
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self.params:
            value = self.params[name]
            ptype = self.doc["Parameters"][name].get("Type", "String")
            if ptype.startswith("List<") or ptype == "CommaDelimitedList":
                return [v for v in str(value).split(",") if v]
            return value
        res = self.resources.get(name)
        if res is None:
            raise Unresolvable(f"!Ref {name}: no such parameter or resource")
        props = res.get("Properties", {})
        rtype = res["Type"]
        if rtype == "AWS::DynamoDB::Table":
            return self.resolve(props["TableName"])
        if rtype == "AWS::SQS::Queue":
            return f"https://sqs.{self.region}.amazonaws.com/{self.account}/{self.resolve(props['QueueName'])}"
        if rtype == "AWS::Logs::LogGroup":
            return self.resolve(props["LogGroupName"])
        if rtype == "AWS::IAM::Role":
            return self.resolve(props["RoleName"])
        raise Unresolvable(f"!Ref {name} ({rtype}): its physical id is known only once deployed")

    def get_att(self, name, attr):
        res = self.resources.get(name)
        if res is None:
            raise Unresolvable(f"!GetAtt {name}.{attr}: no such resource")
        props = res.get("Properties", {})
        rtype = res["Type"]
        p, r, a = self.pseudo["AWS::Partition"], self.region, self.account
        if rtype == "AWS::DynamoDB::Table" and attr == "Arn":
            return f"arn:{p}:dynamodb:{r}:{a}:table/{self.resolve(props['TableName'])}"
        if rtype == "AWS::SQS::Queue" and attr == "Arn":
            return f"arn:{p}:sqs:{r}:{a}:{self.resolve(props['QueueName'])}"
        if rtype == "AWS::SQS::Queue" and attr == "QueueName":
            return self.resolve(props["QueueName"])
        if rtype == "AWS::Logs::LogGroup" and attr == "Arn":
            return f"arn:{p}:logs:{r}:{a}:log-group:{self.resolve(props['LogGroupName'])}:*"
        raise Unresolvable(f"!GetAtt {name}.{attr} ({rtype}): known only once deployed")

    def sub(self, text, variables):
        def one(m):
            key = m.group(1)
            if key.startswith("!"):
                return "${" + key[1:] + "}"
            if key in variables:
                return str(self.resolve(variables[key]))
            if "." in key:
                res, attr = key.split(".", 1)
                return str(self.get_att(res, attr))
            value = self.ref(key)
            if value is NO_VALUE:
                raise Unresolvable(f"${{{key}}} is AWS::NoValue")
            return str(value)

        return re.sub(r"\$\{([^}]+)\}", one, text)

    def resolve(self, node):
        """The value of `node` with every intrinsic evaluated; NO_VALUE drops it."""
        if isinstance(node, list):
            out = [self.resolve(v) for v in node]
            return [v for v in out if v is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (key, arg), = node.items()
            if key == "Ref":
                return self.ref(arg)
            if key == "Condition":
                return self.condition(arg)
            if key == "Fn::Sub":
                if isinstance(arg, list):
                    return self.sub(arg[0], arg[1])
                return self.sub(arg, {})
            if key == "Fn::GetAtt":
                return self.get_att(arg[0], arg[1])
            if key == "Fn::If":
                return self.resolve(arg[1] if self.condition(arg[0]) else arg[2])
            if key == "Fn::Equals":
                a, b = (self.resolve(v) for v in arg)
                return str(a) == str(b)
            if key == "Fn::And":
                return all(self.resolve(v) for v in arg)
            if key == "Fn::Or":
                return any(self.resolve(v) for v in arg)
            if key == "Fn::Not":
                return not self.resolve(arg[0])
            if key == "Fn::Select":
                return self.resolve(arg[1])[int(self.resolve(arg[0]))]
            if key == "Fn::Split":
                return str(self.resolve(arg[1])).split(arg[0])
            if key == "Fn::Join":
                return arg[0].join(str(v) for v in self.resolve(arg[1]))
            if key.startswith("Fn::"):
                raise Unresolvable(f"{key} is not supported by the gate")
        out = {}
        for k, v in node.items():
            v = self.resolve(v)
            if v is not NO_VALUE:
                out[k] = v
        return out

    def role_policies(self, logical_id):
        """The role's policy documents, resolved: [(name, document)]."""
        res = self.resources.get(logical_id)
        if res is None or res["Type"] != "AWS::IAM::Role":
            raise SystemExit(f"iam_gate: {logical_id} is not an AWS::IAM::Role of the template")
        props = res.get("Properties", {})
        out = []
        for policy in props.get("Policies", []):
            out.append((self.resolve(policy["PolicyName"]), self.resolve(policy["PolicyDocument"])))
        for arn in self.resolve(props.get("ManagedPolicyArns", [])):
            out.append((arn, managed_policy(arn)))
        return out

    def hash_keys(self):
        """Table name -> (partition key of the table, {index: its partition key})."""
        out = {}
        for res in self.resources.values():
            if res["Type"] != "AWS::DynamoDB::Table":
                continue
            props = res["Properties"]
            try:
                name = self.resolve(props["TableName"])
            except Unresolvable:
                continue
            table_hash = next(k["AttributeName"] for k in props["KeySchema"] if k["KeyType"] == "HASH")
            indexes = {
                gsi["IndexName"]: next(k["AttributeName"] for k in gsi["KeySchema"] if k["KeyType"] == "HASH")
                for gsi in props.get("GlobalSecondaryIndexes", [])
            }
            out[name] = (table_hash, indexes)
        return out


def managed_policy(arn):
    if arn.endswith(":policy/service-role/AWSLambdaVPCAccessExecutionRole"):
        return {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow",
            "Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents",
                       "ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces",
                       "ec2:DescribeSubnets", "ec2:DeleteNetworkInterface",
                       "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"],
            "Resource": "*"}]}
    # Unknown to the gate: grants nothing.
    return {"Version": "2012-10-17", "Statement": []}


# ---------------------------------------------------------------- evaluation


def as_list(v):
    if v is None:
        return []
    return v if isinstance(v, list) else [v]


def glob(pattern, value, case=True):
    if not case:
        pattern, value = pattern.lower(), value.lower()
    # fnmatch's [..] classes are not IAM's: escape them.
    pattern = pattern.replace("[", "[[]")
    return fnmatch.fnmatchcase(value, pattern)


SET_OPERATORS = {
    "StringLike": lambda pattern, v: glob(pattern, v),
    "StringEquals": lambda pattern, v: pattern == v,
}
UNDERSTOOD_KEYS = {"dynamodb:LeadingKeys"}


def condition_holds(condition, context):
    """True/False, or None when the gate does not understand the condition."""
    for operator, keys in condition.items():
        qualifier, _, op = operator.rpartition(":")
        if qualifier not in ("ForAllValues", "ForAnyValue") or op not in SET_OPERATORS:
            return None
        for key, patterns in keys.items():
            if key not in UNDERSTOOD_KEYS:
                return None
            values = context.get(key)
            if values is None:
                # The key is absent from the request: ForAllValues holds
                # (vacuously), ForAnyValue does not, as in IAM.
                if qualifier == "ForAnyValue":
                    return False
                continue
            match = SET_OPERATORS[op]
            hits = [any(match(p, v) for p in as_list(patterns)) for v in values]
            if qualifier == "ForAllValues" and not all(hits):
                return False
            if qualifier == "ForAnyValue" and not any(hits):
                return False
    return True


def statement_applies(st, action, resource, context):
    """(applies, note): whether `st` covers the request; note when a condition was not understood."""
    if "Action" in st:
        if not any(glob(p, action, case=False) for p in as_list(st["Action"])):
            return False, None
    elif "NotAction" in st:
        if any(glob(p, action, case=False) for p in as_list(st["NotAction"])):
            return False, None
    else:
        return False, None
    if "Resource" in st:
        if not any(glob(p, resource) for p in as_list(st["Resource"])):
            return False, None
    elif "NotResource" in st:
        if any(glob(p, resource) for p in as_list(st["NotResource"])):
            return False, None
    if "Condition" in st:
        holds = condition_holds(st["Condition"], context)
        if holds is None:
            return None, f"condition {json.dumps(st['Condition'])} not understood by the gate"
        if not holds:
            return False, None
    return True, None


def evaluate(policies, action, resource, context):
    """(allowed, reason)."""
    allowed, notes = False, []
    for _, doc in policies:
        for st in as_list(doc.get("Statement")):
            applies, note = statement_applies(st, action, resource, context)
            if note:
                notes.append(note)
            if st.get("Effect") == "Deny" and (applies or applies is None):
                return False, f"explicitly denied by {st.get('Sid', 'a statement')}"
            if st.get("Effect") == "Allow" and applies:
                allowed = True
    if allowed:
        return True, None
    reason = "no identity-based policy allows it"
    if notes:
        reason += " (" + "; ".join(notes) + ")"
    return False, reason


# ---------------------------------------------------------------- requests


class Denied(Exception):
    pass


class Request:
    def __init__(self, method, path, headers, body):
        self.method, self.path, self.headers, self.body = method, path, headers, body
        auth = headers.get("Authorization", "")
        m = re.search(r"Credential=([^/]+)/\d{8}/([^/]+)/([^/]+)/aws4_request", auth)
        self.akid, self.region, self.service = (m.group(1), m.group(2), m.group(3)) if m else (None, None, None)
        self.target = headers.get("X-Amz-Target", "")

    def json(self):
        try:
            return json.loads(self.body or b"{}")
        except ValueError:
            raise Denied("the body is not JSON")

    def form(self):
        return {k: v[0] for k, v in urllib.parse.parse_qs(self.body.decode()).items()}


class Authorizer:
    """What a request needs: [(action, resource, context)]."""

    def __init__(self, template, upstream, region, account):
        self.region, self.account = region, account
        self.keys = template.hash_keys()
        self.upstream = upstream
        self._lock = threading.Lock()
        self._clients = {}

    def admin(self, service):
        with self._lock:
            if service not in self._clients:
                self._clients[service] = boto3.client(
                    service, endpoint_url=self.upstream, region_name=self.region,
                    aws_access_key_id="gate", aws_secret_access_key="gate")
            return self._clients[service]

    def needs(self, req):
        if req.service == "dynamodb" or req.target.startswith("DynamoDB_"):
            return self.dynamodb(req)
        if req.service == "sqs" or req.target.startswith("AmazonSQS."):
            return self.sqs(req)
        if req.service == "secretsmanager" or req.target.startswith("secretsmanager."):
            return self.secrets(req)
        if req.service == "ses" or req.path.startswith("/v2/email/"):
            return self.ses(req)
        raise Denied(f"service {req.service!r} ({req.method} {req.path}) is not understood by the gate")

    # -- DynamoDB

    def table_arn(self, name, index=None):
        arn = name if name.startswith("arn:") else f"arn:aws:dynamodb:{self.region}:{self.account}:table/{name}"
        return arn + (f"/index/{index}" if index else "")

    def leading_keys(self, table, key_or_item=None, query=None, index=None):
        name = table.rsplit("/", 1)[-1]
        known = self.keys.get(name)
        if known is None:
            return {}
        hash_key = known[1].get(index) if index else known[0]
        if hash_key is None:
            return {}
        if key_or_item is not None:
            value = key_or_item.get(hash_key, {})
            return {"dynamodb:LeadingKeys": [v for v in value.values()][:1]}
        if query is not None:
            expr = query.get("KeyConditionExpression", "")
            names = query.get("ExpressionAttributeNames", {})
            values = query.get("ExpressionAttributeValues", {})
            for lhs, rhs in re.findall(r"([#\w]+)\s*=\s*(:\w+)", expr):
                if names.get(lhs, lhs) == hash_key and rhs in values:
                    return {"dynamodb:LeadingKeys": list(values[rhs].values())[:1]}
            raise Denied(f"no equality on the partition key {hash_key} in {expr!r}")
        return {}

    def dynamodb(self, req):
        op = req.target.split(".", 1)[-1]
        body = req.json()
        if op in ("GetItem", "DeleteItem", "UpdateItem"):
            t = body["TableName"]
            return [(f"dynamodb:{op}", self.table_arn(t), self.leading_keys(t, body.get("Key", {})))]
        if op == "PutItem":
            t = body["TableName"]
            return [(f"dynamodb:{op}", self.table_arn(t), self.leading_keys(t, body.get("Item", {})))]
        if op == "Query":
            t, i = body["TableName"], body.get("IndexName")
            return [(f"dynamodb:{op}", self.table_arn(t, i), self.leading_keys(t, query=body, index=i))]
        if op == "Scan":
            return [(f"dynamodb:{op}", self.table_arn(body["TableName"], body.get("IndexName")), {})]
        if op in ("BatchWriteItem", "BatchGetItem"):
            out = []
            for t, entries in body.get("RequestItems", {}).items():
                if op == "BatchGetItem":
                    keys = [self.leading_keys(t, k) for k in entries.get("Keys", [])]
                else:
                    keys = [self.leading_keys(t, e.get("PutRequest", {}).get("Item") or e.get("DeleteRequest", {}).get("Key", {}))
                            for e in entries]
                leading = sorted({v for k in keys for v in k.get("dynamodb:LeadingKeys", [])})
                out.append((f"dynamodb:{op}", self.table_arn(t), {"dynamodb:LeadingKeys": leading} if leading else {}))
            return out
        if op in ("TransactWriteItems", "TransactGetItems"):
            kinds = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem",
                     "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}
            out = []
            for item in body.get("TransactItems", []):
                (kind, spec), = item.items()
                t = spec["TableName"]
                out.append((f"dynamodb:{kinds[kind]}", self.table_arn(t),
                            self.leading_keys(t, spec.get("Key") or spec.get("Item") or {})))
            return out
        if "TableName" in body:
            return [(f"dynamodb:{op}", self.table_arn(body["TableName"]), {})]
        if op in ("ListTables", "DescribeLimits", "DescribeEndpoints"):
            return [(f"dynamodb:{op}", "*", {})]
        raise Denied(f"DynamoDB {op}: its resource is not understood by the gate")

    # -- SQS

    BATCHES = {"SendMessageBatch": "SendMessage", "DeleteMessageBatch": "DeleteMessage",
               "ChangeMessageVisibilityBatch": "ChangeMessageVisibility"}

    def sqs(self, req):
        if req.target.startswith("AmazonSQS."):
            op, body = req.target.split(".", 1)[1], req.json()
            url, name, owner = body.get("QueueUrl"), body.get("QueueName"), body.get("QueueOwnerAWSAccountId")
        else:
            body = req.form() if req.method == "POST" else {
                k: v[0] for k, v in urllib.parse.parse_qs(urllib.parse.urlsplit(req.path).query).items()}
            op = body.get("Action")
            url, name, owner = body.get("QueueUrl"), body.get("QueueName"), body.get("QueueOwnerAWSAccountId")
            if url is None and req.path.strip("/").count("/") >= 1:
                url = req.path.split("?")[0]
        if not op:
            raise Denied("SQS: no action in the request")
        action = "sqs:" + self.BATCHES.get(op, op)
        if op == "ListQueues":
            return [(action, "*", {})]
        if url:
            parts = urllib.parse.urlsplit(url).path.strip("/").split("/")
            if len(parts) < 2:
                raise Denied(f"SQS {op}: queue URL {url!r} not understood")
            account, name = parts[-2], parts[-1]
        elif name:
            account = owner or self.account
        else:
            raise Denied(f"SQS {op}: no queue in the request")
        return [(action, f"arn:aws:sqs:{self.region}:{account}:{name}", {})]

    # -- Secrets Manager

    def secret_arn(self, secret_id):
        if secret_id.startswith("arn:"):
            return secret_id
        try:
            return self.admin("secretsmanager").describe_secret(SecretId=secret_id)["ARN"]
        except Exception:  # not there: what its ARN would be
            return f"arn:aws:secretsmanager:{self.region}:{self.account}:secret:{secret_id}-xxxxxx"

    def secrets(self, req):
        op, body = req.target.split(".", 1)[-1], req.json()
        action = f"secretsmanager:{op}"
        if op == "CreateSecret":
            return [(action, f"arn:aws:secretsmanager:{self.region}:{self.account}:secret:{body['Name']}-xxxxxx", {})]
        if "SecretId" in body:
            return [(action, self.secret_arn(body["SecretId"]), {})]
        if op in ("ListSecrets", "GetRandomPassword", "BatchGetSecretValue"):
            return [(action, "*", {})]
        raise Denied(f"Secrets Manager {op}: its resource is not understood by the gate")

    # -- SES v2

    def identity_arn(self, identity):
        return f"arn:aws:ses:{self.region}:{self.account}:identity/{identity}"

    def sending_identity(self, address):
        address = address.split("<")[-1].rstrip(">").strip()
        try:
            self.admin("sesv2").get_email_identity(EmailIdentity=address)
            return address
        except Exception:
            return address.split("@", 1)[-1]

    def ses(self, req):
        path = urllib.parse.urlsplit(req.path).path
        m = re.fullmatch(r"/v2/email/identities/([^/]+)", path)
        if m and req.method == "GET":
            return [("ses:GetEmailIdentity", self.identity_arn(urllib.parse.unquote(m.group(1))), {})]
        if path == "/v2/email/outbound-emails" and req.method == "POST":
            body = req.json()
            content = body.get("Content", {})
            sender = body.get("FromEmailAddress")
            if sender is None and "Raw" in content:
                raw = email.message_from_bytes(base64.b64decode(content["Raw"]["Data"]))
                sender = raw.get("From")
            if not sender:
                raise Denied("SES SendEmail: no From address")
            resources = [self.identity_arn(self.sending_identity(sender))]
            if body.get("ConfigurationSetName"):
                resources.append(f"arn:aws:ses:{self.region}:{self.account}:configuration-set/{body['ConfigurationSetName']}")
            actions = ["ses:SendEmail"] + (["ses:SendRawEmail"] if "Raw" in content else [])
            return [(a, r, {}) for a in actions for r in resources]
        raise Denied(f"SES {req.method} {path}: not understood by the gate")


# ---------------------------------------------------------------- server


def error_response(req, role, action, resource, reason):
    who = f"arn:aws:sts::{ACCOUNT}:assumed-role/{role or '(no role)'}/iam-gate"
    message = f"User: {who} is not authorized to perform: {action} on resource: {resource} because {reason}"
    if req.headers.get("X-Amz-Target") or req.path.startswith("/v2/"):
        status = 403 if req.path.startswith("/v2/") else 400
        body = json.dumps({"__type": "com.amazon.coral.service#AccessDeniedException",
                           "message": message, "Message": message}).encode()
        headers = {"Content-Type": "application/x-amz-json-1.0",
                   "x-amzn-ErrorType": "AccessDeniedException",
                   "x-amzn-query-error": "AccessDenied;Sender"}
        return status, headers, body
    body = ("<?xml version=\"1.0\"?><ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>"
            f"<Message>{message}</Message></Error><RequestId>iam-gate</RequestId></ErrorResponse>").encode()
    return 403, {"Content-Type": "text/xml"}, body


ACCOUNT = "123456789012"


class Gate:
    def __init__(self, args):
        params = dict(p.split("=", 1) for p in args.param)
        self.template = Template(args.template, params, args.region, args.account)
        roles = {r.split("=", 1)[1] for r in args.principal} | set(args.role_listener)
        self.policies = {r: self.template.role_policies(r) for r in roles}
        self.principals = dict(p.split("=", 1) for p in args.principal)
        self.authorizer = Authorizer(self.template, args.upstream, args.region, args.account)
        self.upstream = urllib.parse.urlsplit(args.upstream)
        self.denials = []
        self.lock = threading.Lock()
        self.log = open(args.denials, "a") if args.denials else None

    def deny(self, role, action, resource, reason):
        entry = {"role": role, "action": action, "resource": resource, "reason": reason}
        line = f"iam_gate: DENIED role={role} action={action} resource={resource}: {reason}"
        with self.lock:
            self.denials.append(entry)
            print(line, flush=True)
            if self.log:
                self.log.write(line + "\n")
                self.log.flush()

    def decide(self, role, req):
        """None when allowed, else (action, resource, reason)."""
        if role is None:
            return ("?", "?", f"access key {req.akid!r} names no role the gate knows")
        try:
            needs = self.authorizer.needs(req)
        except (Denied, KeyError, ValueError) as e:
            return (req.target or f"{req.method} {req.path}", "?", f"not understood: {e}")
        for action, resource, context in needs:
            ok, reason = evaluate(self.policies[role], action, resource, context)
            if not ok:
                if context:
                    reason += f" (request context {json.dumps(context)})"
                return (action, resource, reason)
        return None

    def handler(self, listener_role):
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def handle_any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.path == "/__gate/denials":
                    with gate.lock:
                        payload = json.dumps(gate.denials).encode()
                    return self.answer(200, {"Content-Type": "application/json"}, payload)
                req = Request(self.command, self.path, self.headers, body)
                role = listener_role or gate.principals.get(req.akid)
                denied = gate.decide(role, req)
                if denied:
                    gate.deny(role, *denied)
                    return self.answer(*error_response(req, role, *denied))
                self.forward(body)

            def forward(self, body):
                conn = http.client.HTTPConnection(gate.upstream.hostname, gate.upstream.port, timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "keep-alive")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                out = {k: v for k, v in resp.getheaders()
                       if k.lower() not in ("transfer-encoding", "connection", "content-length", "keep-alive")}
                conn.close()
                self.answer(resp.status, out, data)

            def answer(self, status, headers, body):
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = handle_any

        return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--template", required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--param", action="append", default=[], help="NAME=VALUE, a template parameter")
    ap.add_argument("--principal", action="append", default=[], help="AKID=RoleLogicalId")
    ap.add_argument("--role-listener", action="append", default=[], help="RoleLogicalId: a listener of its own")
    ap.add_argument("--denials", help="append each denial to this file")
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--account", default="123456789012")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--until-stdin-closes", action="store_true",
                    help="stop when stdin closes (a test's pipe: the gate dies with the test)")
    args = ap.parse_args()
    global ACCOUNT
    ACCOUNT = args.account
    try:
        gate = Gate(args)
    except Unresolvable as e:
        raise SystemExit(f"iam_gate: cannot resolve the template's role policies: {e}")
    listeners = [("*", None)] + [(r, r) for r in args.role_listener]
    servers = []
    for label, role in listeners:
        server = http.server.ThreadingHTTPServer((args.host, 0), gate.handler(role))
        server.daemon_threads = True
        servers.append(server)
        print(f"iam_gate: {label} on http://{args.host}:{server.server_address[1]}", flush=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print("iam_gate: ready", flush=True)
    try:
        if args.until_stdin_closes:
            sys.stdin.read()
        else:
            threading.Event().wait()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
