"""moto's server, with DynamoDB requests taken one at a time.

moto serves requests on threads and checks a DynamoDB condition expression
and applies the write as two steps, so two conditional writes racing on one
item can both succeed, which DynamoDB itself never allows. Toki's index
relies on that atomicity (its version marker), and the conformance test that
races twelve writes of one schedule found the difference under load. One lock
around DynamoDB requests makes moto as atomic as the service; the other
services (SQS long polls included) stay concurrent.

    python scripts/moto_server.py -H 127.0.0.1 -p PORT [--requests FILE]

With --requests, each DynamoDB request is appended to FILE as one line:
seconds since the epoch when it came, the operation, the tables it names
(scripts/idle_aws.py counts them), then the seconds it waited for the lock
and the seconds moto took over it.
"""

import argparse
import io
import json
import threading
import time

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple

DYNAMODB = threading.Lock()


def query_reads_one_partition() -> None:
    """moto answers a Query on a table's own key by sorting every item of
    the table and keeping the partition's: with the index's thousands of
    rows, the work marks' one-a-second Query took half a second, under the
    lock above, and held up everything else. DynamoDB reads the partition
    only; so does this (a Query on a secondary index is left as moto does
    it). Run under the lock: the items are narrowed for one call."""
    from moto.dynamodb.models.table import Table

    whole_table = Table.query

    def query(self, hash_key, *args, **kwargs):
        index_name = kwargs.get("index_name", args[6] if len(args) > 6 else None)
        if index_name or not self.range_key_attr or hash_key is None:
            return whole_table(self, hash_key, *args, **kwargs)
        partition = list(self.items.get(hash_key, {}).values())
        self.all_items = lambda: partition
        try:
            return whole_table(self, hash_key, *args, **kwargs)
        finally:
            del self.all_items

    Table.query = query


def tables(body):
    """The tables a DynamoDB request names (its TableName, or the keys of
    its RequestItems, or its TransactItems' tables)."""
    try:
        req = json.loads(body or b"{}")
    except ValueError:
        return ["?"]
    if "TableName" in req:
        return [req["TableName"]]
    if "RequestItems" in req:
        return sorted(req["RequestItems"])
    names = set()
    for item in req.get("TransactItems", []):
        for op in item.values():
            names.add(op.get("TableName", "?"))
    return sorted(names) or ["?"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    parser.add_argument("--requests", help="append one line per DynamoDB request to this file")
    args = parser.parse_args()
    query_reads_one_partition()
    moto = DomainDispatcherApplication(create_backend_app)
    log = open(args.requests, "a", buffering=1) if args.requests else None

    def app(environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target.startswith("DynamoDB_"):
            came = time.time()
            body = b""
            if log:
                body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
                environ["wsgi.input"] = io.BytesIO(body)
            with DYNAMODB:
                began = time.time()
                # The whole body is produced under the lock.
                answer = list(moto(environ, start_response))
            if log:
                op = target.split(".", 1)[-1]
                log.write(f"{came:.3f} {op} {','.join(tables(body))} {began - came:.4f} {time.time() - began:.4f}\n")
            return answer
        return moto(environ, start_response)

    run_simple(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
