#!/usr/bin/env python3
# What an idle `toki daemon` asks of the shared stores at N tenants, on the
# aws backend's stack on this machine (issue 60):
#   scripts/idle_aws.py --toki target/release/toki [--seconds 60] [--warmup 20] N [N ...]
# Needs the emulators' virtualenvs that scripts/test.sh makes (.venv-tools,
# .venv-localstack) and Postgres ($DATABASE_URL, else the local server).
# For each N, on freshly started emulators: the daemon starts (it creates its
# tables and queues), N tenants are written straight into the directory
# table (their databases are not created: an idle daemon must open none, and
# an attempt would fail and be logged), then after --warmup seconds, over
# --seconds: DynamoDB requests by operation and table (moto's request log),
# SQS requests (LocalStack's log), Postgres sessions opened (pg_stat_database,
# every database) and the tenant-database errors the daemon logged, with its
# CPU, RSS and open descriptors. Prints one table row per N.
import collections, os, re, shutil, socket, subprocess, sys, tempfile, time
import urllib.request

from idle_tenants import arguments, cpu_s, status_mb

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_up(url, what):
    for _ in range(600):
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except Exception:
            time.sleep(0.1)
    sys.exit(f"{what} did not come up ({url})")


def psql(url, sql):
    out = subprocess.run(["psql", url, "-Atc", sql], capture_output=True, text=True, check=True)
    return out.stdout.strip()


class Emulators:
    def __init__(self, work):
        self.work, self.procs = work, []
        self.moto, self.sqs = free_port(), free_port()
        self.requests = os.path.join(work, "dynamodb-requests.log")
        self.ls_log = os.path.join(work, "localstack.log")
        py = os.path.join(ROOT, ".venv-tools", "bin", "python")
        self.procs.append(subprocess.Popen(
            [py, os.path.join(ROOT, "scripts", "moto_server.py"), "-H", "127.0.0.1",
             "-p", str(self.moto), "--requests", self.requests],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "moto.log"), "w")))
        env = dict(os.environ, OVERRIDE_IN_DOCKER="0", GATEWAY_LISTEN=f"127.0.0.1:{self.sqs}",
                   SERVICES="sqs", LOCALSTACK_VOLUME_DIR=os.path.join(work, "ls"))
        ls_py = os.path.join(ROOT, ".venv-localstack", "bin", "python")
        self.procs.append(subprocess.Popen(
            [ls_py, "-m", "localstack.runtime.main"], cwd=work, env=env,
            stdout=open(self.ls_log, "w"), stderr=subprocess.STDOUT))
        wait_up(f"http://127.0.0.1:{self.moto}/moto-api/", "moto")
        wait_up(f"http://127.0.0.1:{self.sqs}/_localstack/health", "LocalStack")

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait()


def write_tenants(emu, table, n, template):
    """N directory items, 25 a request (BatchWriteItem's limit)."""
    import boto3  # the tools' virtualenv has it (moto's dependency)
    db = boto3.client("dynamodb", endpoint_url=f"http://127.0.0.1:{emu.moto}", region_name="us-east-1",
                      aws_access_key_id="test", aws_secret_access_key="test")
    for _ in range(600):
        try:
            db.describe_table(TableName=table)
            break
        except db.exceptions.ResourceNotFoundException:
            time.sleep(0.1)
    ids = [f"idle-{i:05d}" for i in range(n)]
    for start in range(0, n, 25):
        items = [{"PutRequest": {"Item": {
            "tenant": {"S": t}, "reminders_enabled": {"BOOL": True}, "active": {"BOOL": True},
            "database": {"S": template.replace("{tenant}", t)}, "api_key_sha256": {"S": ""},
            "api_keys": {"S": "[]"}}}} for t in ids[start:start + 25]]
        left = db.batch_write_item(RequestItems={table: items})["UnprocessedItems"]
        if left:
            sys.exit(f"the directory refused {len(left[table])} items")
    count = sum(page["Count"] for page in
                db.get_paginator("scan").paginate(TableName=table, Select="COUNT"))
    if count != n:
        sys.exit(f"the directory holds {count} tenants, not {n}")


def count_requests(path, since, until):
    by = collections.Counter()
    with open(path) as f:
        for line in f:
            t, op, tables = line.split()[:3]
            if since <= float(t) < until:
                by[(op, tables)] += 1
    return by


def count_sqs(path, offset_from, offset_to):
    with open(path) as f:
        f.seek(offset_from)
        text = f.read(offset_to - offset_from)
    return collections.Counter(re.findall(r"AWS sqs\.(\w+) =>", text))


def sessions(url):
    return int(psql(url, "SELECT COALESCE(SUM(sessions), 0) FROM pg_stat_database"))


def run_one(toki, n, warmup, seconds, pg):
    work = tempfile.mkdtemp(prefix=f"toki-idle-aws{n}-")
    emu = Emulators(work)
    run = f"idle{n}x{os.getpid()}"
    template = pg.rsplit("/", 1)[0] + "/toki_" + run + "_{tenant}"
    index, directory = f"i{run}", f"t{run}"
    env = dict(os.environ, TOKI_BACKEND="aws", AWS_REGION="us-east-1", AWS_ACCESS_KEY_ID="test",
               AWS_SECRET_ACCESS_KEY="test",
               AWS_ENDPOINT_URL_SQS=f"http://127.0.0.1:{emu.sqs}",
               AWS_ENDPOINT_URL_DYNAMODB=f"http://127.0.0.1:{emu.moto}",
               AWS_ENDPOINT_URL_SECRETS_MANAGER=f"http://127.0.0.1:{emu.moto}",
               TOKI_AWS_CREATE_RESOURCES="true", TOKI_INDEX_TABLE=index,
               TOKI_DIRECTORY_TABLE=directory, TOKI_QUEUE_NAME=f"q{run}", TOKI_DLQ_NAME=f"d{run}",
               TOKI_DATABASE_URL_TEMPLATE=template)
    log_path = os.path.join(work, "daemon.log")
    daemon = subprocess.Popen([toki, "daemon", "--data-dir", work], env=env,
                              stdout=subprocess.DEVNULL, stderr=open(log_path, "w"))
    try:
        t0 = time.monotonic()
        write_tenants(emu, directory, n, template)
        print(f"  {n} tenants written in {time.monotonic() - t0:.1f} s", file=sys.stderr)
        time.sleep(warmup)
        if daemon.poll() is not None:
            sys.exit(f"the daemon stopped: {log_path}")
        since, s0, c0 = time.time(), sessions(pg), cpu_s(daemon.pid)
        ls0, log0 = os.path.getsize(emu.ls_log), os.path.getsize(log_path)
        time.sleep(seconds)
        until, s1, c1 = time.time(), sessions(pg), cpu_s(daemon.pid)
        ls1, log1 = os.path.getsize(emu.ls_log), os.path.getsize(log_path)
        fds = len(os.listdir(f"/proc/{daemon.pid}/fd"))
        rss = status_mb(daemon.pid, "VmRSS")
    finally:
        daemon.terminate()
        daemon.wait()
        emu.stop()
    span = until - since
    dynamo = count_requests(emu.requests, since, until)
    sqs = count_sqs(emu.ls_log, ls0, ls1)
    with open(log_path) as f:
        f.seek(log0)
        tenant_errors = sum(1 for line in f.read(log1 - log0).splitlines()
                            if "tenant" in line and ("WARN" in line or "ERROR" in line))
    shutil.rmtree(work)
    return {
        "tenants": n, "seconds": span,
        "directory": sum(c for (op, t), c in dynamo.items() if directory in t) / span,
        "index": sum(c for (op, t), c in dynamo.items() if index in t) / span,
        "dynamo_ops": {f"{op} {'directory' if directory in t else 'index' if index in t else t}": c
                       for (op, t), c in sorted(dynamo.items())},
        "sqs": sum(sqs.values()) / span, "sqs_ops": dict(sqs),
        # One of them is the psql that reads the count.
        "pg_sessions": max(s1 - s0 - 1, 0) / span, "tenant_errors": tenant_errors,
        "cpu": (c1 - c0) / span * 100, "rss": rss, "fds": fds,
    }


def main():
    args = arguments()
    pg = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    rows = [run_one(os.path.abspath(args.toki), n, args.warmup, args.seconds, pg) for n in args.tenants]
    print("| tenants | directory req/s | index req/s | SQS req/s | Postgres sessions/s "
          "| tenant-database errors | CPU, % of a core | RSS | open fds |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['tenants']:,} | {r['directory']:.2f} | {r['index']:.2f} | {r['sqs']:.2f} "
              f"| {r['pg_sessions']:.2f} | {r['tenant_errors']} | {r['cpu']:.2f} | {r['rss']:.1f} MB "
              f"| {r['fds']} |")
    for r in rows:
        print(f"{r['tenants']} tenants, over {r['seconds']:.0f} s: DynamoDB {r['dynamo_ops']}; SQS {r['sqs_ops']}")


if __name__ == "__main__":
    main()
