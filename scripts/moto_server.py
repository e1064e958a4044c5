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
seconds since the epoch, the operation and the tables it names
(scripts/idle_aws.py counts them).
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
    moto = DomainDispatcherApplication(create_backend_app)
    log = open(args.requests, "a", buffering=1) if args.requests else None

    def app(environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target.startswith("DynamoDB_"):
            if log:
                body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
                environ["wsgi.input"] = io.BytesIO(body)
                op = target.split(".", 1)[-1]
                log.write(f"{time.time():.3f} {op} {','.join(tables(body))}\n")
            with DYNAMODB:
                # The whole body is produced under the lock.
                return list(moto(environ, start_response))
        return moto(environ, start_response)

    run_simple(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
