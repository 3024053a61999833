"""A client of the lock service, written from docs/PROTOCOL.md alone, with the standard
library only (socket, ssl, json, struct, threading).

    client = LockClient(["10.0.0.1:7401", "10.0.0.2:7401"], ttl_ms=10_000)
    client.open()
    hold = client.acquire("invoice-42", "worker-1", timeout=30.0)
    # ... write to the resource with hold.token as the fencing token, while not hold.lost ...
    client.release(hold)
    client.close()

One session per client, kept alive by a thread of its own every TTL/3; one connection to the
leader at a time, read by a thread of its own that hands replies to their callers (by id) and
pushes to the session. A broken connection, `NotLeader` or `Unavailable` sends the client to
find the leader again and resume the session there.

Run as a script, it asks one node for its status:

    python3 lockclient.py status HOST:PORT [--ca CA.pem]
"""

import itertools
import json
import select
import socket
import ssl
import struct
import sys
import threading
import time
import unicodedata

MAX_CLIENT_FRAME = 64 * 1024
MAX_SERVER_FRAME = 16 * 1024 * 1024
MIN_TTL_MS = 200
MAX_TTL_MS = 3_600_000
MAX_ID_LEN = 200


class LockServiceError(Exception):
    """The service refused a request (an `Error` reply), or answered something unexpected."""

    def __init__(self, kind, message):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class SessionLost(Exception):
    """The session is over: every lock it held is gone."""


class LockTimeout(Exception):
    """The lock was not granted in time (the ask was given up)."""


class Unreachable(Exception):
    """No leader answered in time."""


def check_id(what, value):
    """The rules of lock and owner ids: 1 to 200 bytes of UTF-8, no control character, no '/'."""
    if not value:
        raise ValueError(f"{what} must not be empty")
    if len(value.encode("utf-8")) > MAX_ID_LEN:
        raise ValueError(f"{what} {value[:64]!r} is longer than {MAX_ID_LEN} bytes")
    if any(unicodedata.category(c) == "Cc" for c in value):
        raise ValueError(f"{what} {value[:64]!r} must not contain control characters")
    if "/" in value:
        raise ValueError(f"{what} {value[:64]!r} must not contain '/'")


def encode_frame(value):
    """A frame: 4-byte big-endian length, then the JSON."""
    body = json.dumps(value, separators=(",", ":")).encode("utf-8")
    if len(body) > MAX_CLIENT_FRAME:
        raise ValueError(f"a frame of {len(body)} bytes: the service reads at most {MAX_CLIENT_FRAME}")
    return struct.pack(">I", len(body)) + body


def take_frame(buf):
    """The JSON of the first whole frame in `buf` (a bytearray), removed from it; None while
    the frame is not whole."""
    if len(buf) < 4:
        return None
    (length,) = struct.unpack(">I", buf[:4])
    if length > MAX_SERVER_FRAME:
        raise ConnectionError(f"a frame of {length} bytes from the service: too long")
    if len(buf) < 4 + length:
        return None
    body = bytes(buf[4:4 + length])
    del buf[:4 + length]
    return json.loads(body)


def variant(value):
    """(name, fields) of an externally tagged enum: "Alive" -> ("Alive", None),
    {"Granted": {"token": 3}} -> ("Granted", {"token": 3})."""
    if isinstance(value, str):
        return value, None
    if isinstance(value, dict) and len(value) == 1:
        ((name, fields),) = value.items()
        return name, fields
    raise LockServiceError("Protocol", f"not an enum variant: {value!r}")


def split_addr(addr):
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def tls_context(ca_file):
    """A TLS context trusting the cluster's CA only, checking the name or address dialled."""
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


# What a non-blocking socket (plain or TLS) raises when it cannot go on yet.
_NOT_YET = (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError)


class Connection:
    """One connection to one node: requests by id, and a reader thread that routes replies
    to their callers and pushes to `on_push`.

    The socket is non-blocking and every use of it (a read, a write, a shutdown) holds
    `io_lock`: an SSL object must not be read by one thread while another writes it. The
    reader waits for bytes with select(), outside the lock."""

    def __init__(self, addr, connect_timeout, tls=None, on_push=None, on_close=None):
        self.addr = addr
        host, port = split_addr(addr)
        sock = socket.create_connection((host, port), timeout=connect_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            try:
                sock = tls.wrap_socket(sock, server_hostname=host)
            except OSError:
                sock.close()
                raise
        sock.setblocking(False)
        self.sock = sock
        self.on_push = on_push
        self.on_close = on_close
        self.ids = itertools.count(1)  # never 0: the node answers with 0 what it cannot place
        self.pending = {}
        self.lock = threading.Lock()
        self.io_lock = threading.Lock()
        self.closed = False
        self.refusal = None  # an id-0 error: the node's word on the whole connection
        self.reader = threading.Thread(target=self._read, name=f"lockclient-{addr}", daemon=True)
        self.reader.start()

    def _recv(self):
        """Bytes from the socket; b"" at its end; None when none are ready."""
        with self.io_lock:
            try:
                return self.sock.recv(65536)
            except _NOT_YET:
                return None

    def _frames(self):
        """The frames from the node, until the end of the stream."""
        buf = bytearray()
        while True:
            data = self._recv()
            if data is None:
                select.select([self.sock], [], [], 1.0)
                continue
            if not data:
                return
            buf.extend(data)
            while True:
                frame = take_frame(buf)
                if frame is None:
                    break
                yield frame

    def _read(self):
        try:
            for frame in self._frames():
                name, fields = variant(frame)
                if name == "Reply":
                    if fields["id"] == 0:
                        # A frame the node could not tie to a request (ours was malformed,
                        # or the node refuses the connection: TLS only, a closing reason).
                        self.refusal = fields["body"]
                        sys.stderr.write(f"lockclient: {self.addr} says {fields['body']!r}\n")
                        continue
                    with self.lock:
                        slot = self.pending.pop(fields["id"], None)
                    if slot is not None:
                        slot[1] = fields["body"]
                        slot[0].set()
                elif name == "Push" and self.on_push is not None:
                    self.on_push(self, fields)
        except (OSError, ValueError, KeyError, TypeError, LockServiceError):
            pass  # the node closed the connection, or sent what this client cannot read
        finally:
            self._shut()

    def _shut(self):
        with self.lock:
            was_closed, self.closed = self.closed, True
            waiting, self.pending = self.pending, {}
        for event, _ in waiting.values():
            event.set()  # with no reply: the connection is gone
        with self.io_lock:
            try:
                self.sock.close()
            except OSError:
                pass
        if not was_closed and self.on_close is not None:
            self.on_close(self)

    def close(self):
        with self.lock:
            self.closed = True
        with self.io_lock:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)  # the reader sees the end of the stream
            except OSError:
                pass

    def _send(self, data):
        view = memoryview(data)
        with self.io_lock:
            while view:
                try:
                    view = view[self.sock.send(view):]
                except ssl.SSLWantReadError:
                    select.select([self.sock], [], [], 1.0)
                except _NOT_YET:
                    select.select([], [self.sock], [], 1.0)

    def request(self, body, timeout):
        """Send `body` and wait up to `timeout` seconds for its reply. ConnectionError when the
        connection is gone; TimeoutError when no reply came in time."""
        slot = [threading.Event(), None]
        with self.lock:
            if self.closed:
                raise ConnectionError(f"{self.addr}: connection closed")
            request_id = next(self.ids)
            self.pending[request_id] = slot
        try:
            self._send(encode_frame({"id": request_id, "body": body}))
        except OSError as e:
            self.close()
            raise ConnectionError(f"{self.addr}: {e}") from e
        if not slot[0].wait(timeout):
            with self.lock:
                self.pending.pop(request_id, None)
            raise TimeoutError(f"{self.addr}: no answer in {timeout:.1f}s")
        if slot[1] is None:
            refusal = self.refusal
            raise ConnectionError(f"{self.addr}: connection lost" + (f" ({refusal!r})" if refusal else ""))
        return slot[1]


class Hold:
    """A granted ask: its lock, owner, fencing token and attempt. `lost` is set when the
    session ends or an administrator takes the lock."""

    def __init__(self, lock, owner, token, attempt):
        self.lock, self.owner, self.token, self.attempt = lock, owner, token, attempt
        self.lost = None

    def __repr__(self):
        return f"Hold({self.lock!r}, {self.owner!r}, token={self.token}, attempt={self.attempt})"


class _Waiter:
    def __init__(self, attempt):
        self.attempt = attempt
        self.event = threading.Event()
        self.token = None


class LockClient:
    """A session with the lock service (see the module docs)."""

    def __init__(self, endpoints, ttl_ms=10_000, user=None, token=None, ca_file=None,
                 connect_timeout=1.0, request_timeout=5.0, follow_leader_hints=True):
        if isinstance(endpoints, str):
            endpoints = [e.strip() for e in endpoints.split(",") if e.strip()]
        if not endpoints:
            raise ValueError("no endpoint given")
        if not MIN_TTL_MS <= ttl_ms <= MAX_TTL_MS:
            raise ValueError(f"TTL {ttl_ms} ms is outside {MIN_TTL_MS} to {MAX_TTL_MS} ms")
        self.endpoints = list(endpoints)
        self.order = list(endpoints)  # the last leader first, failures last
        self.failed = set()  # nodes that failed since they last answered
        self.ttl = ttl_ms / 1000.0
        self.ttl_ms = ttl_ms
        self.credentials = (user, token) if user is not None else None
        self.tls = tls_context(ca_file) if ca_file else None
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.follow_leader_hints = follow_leader_hints
        self.session = None
        self.key = None
        self.conn = None
        self.mu = threading.RLock()
        self.conn_mu = threading.Lock()  # one leader search at a time
        self.attempts = itertools.count(1)
        self.waiting = {}  # (lock, owner) -> _Waiter
        self.held = {}  # (lock, owner) -> Hold
        self.renewed = None  # send time of the last renewing request answered
        self.lost = None
        self.stop = threading.Event()
        self.dropped = threading.Event()
        self.on_leader = None  # called with (election, leader) for each Push::Leader
        self.keeper = None

    # ---- connections and the leader ------------------------------------------------------

    def _dial(self, addr):
        conn = Connection(addr, self.connect_timeout, self.tls, self._on_push, self._on_close)
        if self.credentials is not None:
            user, token = self.credentials
            try:
                reply = conn.request({"Hello": {"user": user, "token": token}}, self.connect_timeout * 2)
            except OSError:
                conn.close()
                raise
            name, fields = variant(reply)
            if name == "Error":
                conn.close()
                raise LockServiceError(fields["kind"], f"{addr}: {fields['message']}")
            if name != "Welcome":
                conn.close()
                raise LockServiceError("Protocol", f"{addr}: unexpected answer to Hello: {reply!r}")
        return conn

    def _find_leader(self, first, hint, deadline):
        """Dial until a leader answers `first`; (connection, reply)."""
        failures = []
        pause = 0.05
        while True:
            candidates = ([hint] if hint else []) + list(self.order)
            hint = None
            for addr in candidates:
                if time.monotonic() >= deadline:
                    break
                try:
                    conn = self._dial(addr)
                except LockServiceError as e:
                    if e.kind in ("Unauthenticated", "BadRequest", "Forbidden"):
                        raise  # every node answers the same
                    failures.append(str(e))
                    continue
                except (OSError, ssl.SSLError) as e:
                    failures.append(f"{addr}: {e}")
                    self._demote(addr)
                    continue
                wait = max(0.0, min(deadline - time.monotonic(), self.connect_timeout * 2))
                try:
                    reply = conn.request(first, wait)
                except (ConnectionError, TimeoutError) as e:
                    conn.close()
                    failures.append(str(e))
                    self._demote(addr)
                    continue
                name, fields = variant(reply)
                if name == "NotLeader":
                    conn.close()
                    failures.append(f"{addr}: not the leader")
                    leader = fields["leader"]
                    if self._worth_following(leader, addr):
                        hint = leader
                        break
                    continue
                if name == "Error" and fields["kind"] == "Unavailable":
                    conn.close()
                    failures.append(f"{addr}: {fields['message']}")
                    continue
                if name == "Error" and fields["kind"] == "Unauthenticated":
                    conn.close()
                    raise LockServiceError("Unauthenticated", f"{addr}: {fields['message']}")
                self._promote(addr)
                return conn, reply
            if time.monotonic() >= deadline:
                raise Unreachable(f"no leader among {self.endpoints} answered: {'; '.join(failures[-6:])}")
            if hint is None:
                time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                pause = min(pause * 2, 0.4)

    def _worth_following(self, leader, answered_by):
        """Follow a NotLeader hint unless it names the node that answered, or one that failed
        since it last answered (during an election followers still name the old leader)."""
        with self.mu:
            return (self.follow_leader_hints and bool(leader) and leader != answered_by
                    and leader not in self.failed)

    def _promote(self, addr):
        with self.mu:
            self.failed.discard(addr)
            if addr in self.order:
                self.order.remove(addr)
                self.order.insert(0, addr)

    def _demote(self, addr):
        with self.mu:
            self.failed.add(addr)
            if addr in self.order:
                self.order.remove(addr)
                self.order.append(addr)

    def _on_close(self, conn):
        if conn is self.conn:
            self.dropped.set()

    def _connection(self, hint, deadline):
        """The open connection to the leader, or a new one with the session resumed on it."""
        with self.conn_mu:
            conn = self.conn
            if conn is not None and not conn.closed:
                return conn
            resume = {"session": self.session}
            if self.key is not None:
                resume["key"] = self.key
            conn, reply = self._find_leader({"Resume": resume}, hint, deadline)
            name, fields = variant(reply)
            if name == "Resumed":
                self.conn = conn
                for lock, owner, token, attempt in fields["held"]:
                    self._granted(lock, owner, token, attempt)
                return conn
            conn.close()
            if name == "Error" and fields["kind"] == "SessionGone":
                self._lose(fields["message"])
                raise SessionLost(fields["message"])
            raise LockServiceError("Protocol", f"unexpected answer to Resume: {reply!r}")

    def _drop(self, conn):
        conn.close()
        with self.conn_mu:
            if self.conn is conn:
                self.conn = None

    def call(self, body, deadline=None):
        """Send `body` to the leader until it answers something other than `NotLeader` or
        `Unavailable`, reconnecting and resuming as needed, until `deadline` (monotonic)."""
        if deadline is None:
            deadline = time.monotonic() + self.request_timeout
        renewing = variant(body)[0] in ("KeepAlive", "Acquire", "Release")
        hint = None
        last = "no attempt"
        while True:
            if self.lost is not None:
                raise SessionLost(self.lost)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"request not answered in time: {last}")
            try:
                conn = self._connection(hint, deadline)
            except Unreachable as e:
                raise TimeoutError(str(e)) from e
            hint = None
            sent = time.monotonic()
            # A node that answers nothing is given up on after TTL/3.
            wait = max(0.0, min(deadline, sent + self.ttl / 3) - sent)
            try:
                reply = conn.request(body, wait)
            except (ConnectionError, TimeoutError) as e:
                self._drop(conn)
                self._demote(conn.addr)
                last = str(e)
                continue
            name, fields = variant(reply)
            if name == "NotLeader":
                self._drop(conn)
                leader = fields["leader"]
                if self._worth_following(leader, conn.addr):
                    hint = leader
                last = f"{conn.addr}: not the leader"
                continue
            if name == "Error" and fields["kind"] == "Unavailable":
                self._drop(conn)
                time.sleep(0.05)
                last = f"{conn.addr}: {fields['message']}"
                continue
            if name == "Error" and fields["kind"] == "SessionGone":
                self._lose(fields["message"])
                raise SessionLost(fields["message"])
            if renewing and name != "Error":
                with self.mu:
                    if self.renewed is None or sent > self.renewed:
                        self.renewed = sent
            return reply

    # ---- the session ----------------------------------------------------------------------

    def open(self):
        """Open the session on the leader and start keeping it alive; returns its id."""
        sent = time.monotonic()
        conn, reply = self._find_leader({"Open": {"ttl_ms": self.ttl_ms}}, None,
                                        sent + self.request_timeout)
        name, fields = variant(reply)
        if name != "Opened":
            conn.close()
            if name == "Error":
                raise LockServiceError(fields["kind"], fields["message"])
            raise LockServiceError("Protocol", f"unexpected answer to Open: {reply!r}")
        self.session = fields["session"]
        # The session's secret: a resume must present it (a node that gives none wants none).
        self.key = fields.get("key")
        self.renewed = sent
        self.conn = conn
        self.keeper = threading.Thread(target=self._keep_alive, name="lockclient-keepalive", daemon=True)
        self.keeper.start()
        return self.session

    def valid_until(self):
        """The monotonic time until which the session surely stands (unless renewed)."""
        with self.mu:
            return self.renewed + self.ttl

    def _keep_alive(self):
        next_at = None
        while not self.stop.is_set() and self.lost is None:
            due = next_at if next_at is not None else self.renewed + self.ttl / 3
            next_at = None
            woken = self.dropped.wait(max(0.0, due - time.monotonic()))
            if self.stop.is_set() or self.lost is not None:
                return
            if woken:
                self.dropped.clear()
                with self.mu:
                    busy = bool(self.held or self.waiting)
                if not busy:
                    next_at = due  # an idle session resumes at its next request
                    continue
            elif self.renewed + self.ttl / 3 > time.monotonic():
                continue  # renewed by another request meanwhile
            try:
                self.call({"KeepAlive": {"session": self.session}}, self.renewed + self.ttl)
            except SessionLost:
                return
            except (TimeoutError, LockServiceError, OSError) as e:
                sys.stderr.write(f"lockclient: keep-alive of session {self.session}: {e}\n")
                next_at = time.monotonic() + 0.1
            if time.monotonic() >= self.renewed + self.ttl:
                self._lose("no request answered within the session TTL")
                return

    def _lose(self, reason):
        with self.mu:
            if self.lost is not None:
                return
            self.lost = reason
            for hold in self.held.values():
                hold.lost = reason
            self.held.clear()
            for waiter in self.waiting.values():
                waiter.event.set()
            self.waiting.clear()
        conn = self.conn
        if conn is not None:
            conn.close()

    def _on_push(self, conn, push):
        name, fields = variant(push)
        if name == "Granted":
            self._granted(fields["lock"], fields["owner"], fields["token"], fields.get("attempt", 0))
        elif name == "Revoked":
            with self.mu:
                hold = self.held.pop((fields["lock"], fields["owner"]), None)
            if hold is not None:
                hold.lost = f"force-released by {fields['by']} (token {fields['token']})"
        elif name == "SessionEnded":
            self._lose(f"the service ended the session: {fields['reason']}")
        elif name == "Leader" and self.on_leader is not None:
            self.on_leader(fields["lock"], fields["leader"])

    def _granted(self, lock, owner, token, attempt):
        """Hand a grant to the very ask it names; a grant for an ask given up on is ignored
        (that ask's release gives it back)."""
        with self.mu:
            waiter = self.waiting.get((lock, owner))
            if waiter is not None and waiter.attempt == attempt:
                waiter.token = token
                waiter.event.set()

    def close(self):
        """End the session: its locks go to their next waiters at once."""
        self.stop.set()
        if self.session is None or self.lost is not None:
            return
        try:
            # The node pushes SessionEnded in the commit, often before the reply: the session
            # is then over either way.
            self.call({"Close": {"session": self.session}})
        except SessionLost:
            pass
        finally:
            self._lose("closed by its client")

    # ---- locks ----------------------------------------------------------------------------

    def acquire(self, lock, owner, timeout=None, share=None):
        """Wait until `owner` holds `lock` (alone, or as `share` says: "Read",
        {"Permits": {"count": k, "limit": n}}) and return the Hold; LockTimeout after
        `timeout` seconds, the ask given up."""
        check_id("lock id", lock)
        check_id("owner id", owner)
        if self.lost is not None:
            raise SessionLost(self.lost)
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        attempt = next(self.attempts)
        waiter = _Waiter(attempt)
        key = (lock, owner)
        with self.mu:
            self.waiting[key] = waiter  # before sending: the push may beat the reply
        ask = {"session": self.session, "lock": lock, "owner": owner, "wait": True, "attempt": attempt}
        if share is not None and share != "Exclusive":
            ask["share"] = share
        try:
            call_by = time.monotonic() + self.request_timeout
            try:
                reply = self.call({"Acquire": ask}, call_by if deadline is None else min(call_by, deadline))
            except TimeoutError as e:
                self._give_up(lock, owner, attempt)  # it may have been committed
                if deadline is not None and time.monotonic() >= deadline:
                    raise LockTimeout(f"{lock}: not granted within {timeout}s") from e
                raise
            name, fields = variant(reply)
            if name == "Granted":
                token = fields["token"]
            elif name == "Queued":
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not waiter.event.wait(wait):
                    self._give_up(lock, owner, attempt)
                    raise LockTimeout(f"{lock}: not granted within {timeout}s")
                if waiter.token is None:
                    raise SessionLost(self.lost or "the session ended")
                token = waiter.token
            elif name == "Error":
                raise LockServiceError(fields["kind"], fields["message"])
            elif name == "Mismatch":
                raise LockServiceError("Mismatch", f"{lock} is in use as {fields['share']!r}")
            else:
                raise LockServiceError("Protocol", f"unexpected answer to Acquire: {reply!r}")
        finally:
            with self.mu:
                if self.waiting.get(key) is waiter:
                    del self.waiting[key]
        hold = Hold(lock, owner, token, attempt)
        with self.mu:
            if self.lost is not None:
                hold.lost = self.lost
            else:
                self.held[key] = hold
        return hold

    def _give_up(self, lock, owner, attempt):
        """Release the ask `attempt`: Released, Cancelled and NotHeld all mean it is given up."""
        try:
            return self._release(lock, owner, attempt)
        except (SessionLost, TimeoutError, LockServiceError, OSError) as e:
            sys.stderr.write(f"lockclient: giving up {lock!r}: {e}\n")
            return None

    def _release(self, lock, owner, attempt):
        body = {"Release": {"session": self.session, "lock": lock, "owner": owner, "attempt": attempt}}
        reply = self.call(body, time.monotonic() + max(self.request_timeout, self.ttl))
        name, fields = variant(reply)
        if name in ("Released", "Cancelled", "NotHeld"):
            return name
        if name == "Error":
            raise LockServiceError(fields["kind"], fields["message"])
        raise LockServiceError("Protocol", f"unexpected answer to Release: {reply!r}")

    def release(self, hold):
        """Give the lock back; returns "Released", or "NotHeld" when it was already gone (a
        retry whose first copy committed, a force-release). A lost session releases nothing."""
        with self.mu:
            if self.held.get((hold.lock, hold.owner)) is hold:
                del self.held[(hold.lock, hold.owner)]
        if self.lost is not None:
            return "SessionLost"
        try:
            return self._release(hold.lock, hold.owner, hold.attempt)
        except SessionLost:
            return "SessionLost"

    def status(self):
        """The status of the node this client is connected to."""
        conn = self.conn
        if conn is None:
            raise ConnectionError("not connected")
        return variant(conn.request("Status", self.request_timeout))[1]


def status(addr, ca_file=None, timeout=2.0):
    """Ask one node for its status, on a connection of its own (plain, or TLS with `ca_file`)."""
    conn = Connection(addr, timeout, tls_context(ca_file) if ca_file else None)
    try:
        name, fields = variant(conn.request("Status", timeout))
        if name != "Status":
            raise LockServiceError("Protocol", f"{addr}: unexpected answer to Status: {name} {fields!r}")
        return fields
    finally:
        conn.close()


def _main(argv):
    import argparse

    parser = argparse.ArgumentParser(description="Ask a lock-service node for its status.")
    sub = parser.add_subparsers(dest="command", required=True)
    st = sub.add_parser("status", help="print a node's status as JSON")
    st.add_argument("endpoint", help="HOST:PORT of the node's client port")
    st.add_argument("--ca", help="speak TLS, trusting this CA (PEM)")
    args = parser.parse_args(argv)
    try:
        print(json.dumps(status(args.endpoint, args.ca)))
    except (OSError, LockServiceError) as e:
        print(f"lockclient: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
