"""The long schemathesis run against a live server (the default suite runs a short one).

usage: python scripts/fuzz_api.py [--requests 100000] [--url http://127.0.0.1:4000]

Without `--url` it starts its own server (tests/support/server.py) on a temporary data dir.
Same checks as tests/http/test_openapi_fuzz.py: no 5xx, every 4xx in the canonical error
shape with the spec's status for its code. Exits 1 and lists the offending requests if any.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.http.test_openapi_fuzz import FuzzReport, fuzzed_operations, run_fuzz
from tests.support.server import ServerProcess

# One generated case costs about this many requests on average (schemathesis adds explicit
# examples and coverage cases); measured with the default suite's run.
REQUESTS_PER_EXAMPLE = 1.0
ROUND_EXAMPLES = 100  # cases per operation per round: progress is printed after each round


def fuzz(url: str, requests: int) -> FuzzReport:
    n_ops = len(fuzzed_operations(url))
    report = FuzzReport()
    t0 = time.monotonic()
    while report.requests < requests:
        left = requests - report.requests
        examples = min(ROUND_EXAMPLES, max(1, math.ceil(left / n_ops / REQUESTS_PER_EXAMPLE)))
        before = report.requests
        run_fuzz(url, examples, report)
        rate = report.requests / (time.monotonic() - t0)
        print(
            f"{report.requests} requests ({rate:.0f}/s), {len(report.problems)} problems",
            flush=True,
        )
        if report.requests == before:
            break
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--url", help="an already running server (default: start one)")
    args = parser.parse_args()
    if args.url:
        report = fuzz(args.url.rstrip("/"), args.requests)
    else:
        with ServerProcess() as srv:
            report = fuzz(srv.url, args.requests)
    print("statuses:", dict(sorted(report.by_status.items())))
    for problem in report.problems:
        print(problem)
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
