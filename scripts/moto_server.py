"""moto's server, with DynamoDB requests taken one at a time.

moto serves requests on threads and checks a DynamoDB condition expression
and applies the write as two steps, so two conditional writes racing on one
item can both succeed, which DynamoDB itself never allows. Toki's index
relies on that atomicity (its version marker), and the conformance test that
races twelve writes of one schedule found the difference under load. One lock
around DynamoDB requests makes moto as atomic as the service; the other
services (SQS long polls included) stay concurrent.

    python scripts/moto_server.py -H 127.0.0.1 -p PORT
"""

import argparse
import threading

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple

DYNAMODB = threading.Lock()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args()
    moto = DomainDispatcherApplication(create_backend_app)

    def app(environ, start_response):
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            with DYNAMODB:
                # The whole body is produced under the lock.
                return list(moto(environ, start_response))
        return moto(environ, start_response)

    run_simple(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
