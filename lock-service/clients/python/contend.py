"""Contend for one lock with the Python client: take it, hold it a moment, give it back, a
number of rounds, and write one line per grant to standard output:

    OWNER TOKEN GRANTED_NS RELEASED_NS

GRANTED_NS is read once the grant has come, RELEASED_NS before the release is sent, both from
time.monotonic_ns(): CLOCK_MONOTONIC on Linux, one clock for every process of a machine, so
the lines of several processes can be checked together: no two holds overlap, and tokens rise
in grant order.

    python3 contend.py --endpoints 127.0.0.1:7401 --lock l --rounds 10 --owner py-1

Exits 0 when every round was granted and released with the session alive, else 1, saying why
on standard error.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lockclient import LockClient, LockServiceError, LockTimeout, SessionLost  # noqa: E402


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoints", required=True, help="HOST:PORT,HOST:PORT,... of the nodes' client ports")
    p.add_argument("--lock", required=True, help="the lock id")
    p.add_argument("--rounds", type=int, required=True)
    p.add_argument("--owner", default=f"py-{os.getpid()}")
    p.add_argument("--hold-ms", type=int, default=20, help="how long each grant is held")
    p.add_argument("--ttl-ms", type=int, default=5000, help="the session's TTL")
    p.add_argument("--timeout-s", type=float, default=20.0, help="the longest wait for one grant")
    p.add_argument("--user", help="the identity, on a node with users")
    p.add_argument("--token", help="its token (or LOCK_SERVICE_TOKEN)")
    p.add_argument("--ca", help="speak TLS, trusting this CA (PEM)")
    args = p.parse_args(argv)

    token = args.token or os.environ.get("LOCK_SERVICE_TOKEN")
    client = LockClient(args.endpoints, ttl_ms=args.ttl_ms, user=args.user, token=token, ca_file=args.ca)
    try:
        client.open()
        for round_ in range(args.rounds):
            hold = client.acquire(args.lock, args.owner, timeout=args.timeout_s)
            granted = time.monotonic_ns()
            time.sleep(args.hold_ms / 1000.0)
            released = time.monotonic_ns()
            # The hold counts only if the session surely stood all along.
            if hold.lost is not None or time.monotonic() >= client.valid_until():
                raise SessionLost(f"round {round_}: the lock was lost while held: {hold.lost}")
            print(f"{args.owner} {hold.token} {granted} {released}", flush=True)
            outcome = client.release(hold)
            if outcome != "Released":
                raise LockServiceError("Release", f"round {round_}: release answered {outcome}")
        client.close()
    except (LockServiceError, LockTimeout, SessionLost, TimeoutError, OSError, ValueError) as e:
        print(f"contend.py {args.owner}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
