"""Pre-warmed Redis read connections that answer one ``MGET`` under one overall deadline.

Why not a plain redis-py client with ``socket_timeout = deadline``: redis-py applies its timeout
to each socket operation, and opens connections lazily on the request path, so a fresh
connection pays connect + handshake (``HELLO``/``AUTH``, ``CLIENT SETINFO``, ``SELECT``) + the
command, each with a full timeout (80 ms for a 20 ms deadline against a Redis answering in
15 ms), and a timed-out connection is reconnected on the next request.

Here redis-py still opens and authenticates every connection (URL options, TLS, ACL users,
RESP version stay redis-py's), but only *off the request path*: at construction (warm-up) and
on a maintenance thread. The request path only takes an idle connection, writes one packed
``MGET`` and parses the reply with hiredis, recomputing the socket timeout from one absolute
deadline before every blocking call; it never connects and never waits for a connection.
A connection whose reply is late goes to the maintenance thread, which drains the reply and
returns it to the pool (or closes it and opens a new one), so one slow reply costs one deadline.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence

import hiredis
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from store.errors import StoreTimeout, StoreUnavailable

log = logging.getLogger(__name__)

#: background connects and drains (never on the request path)
CONNECT_TIMEOUT_S = 2.0
DRAIN_TIMEOUT_S = 1.0
#: wait between reconnect attempts while Redis is down
RETRY_S = 0.5
_RECV_BYTES = 1 << 16


class _Conn:
    """One open, authenticated connection and the hiredis reader of its replies."""

    __slots__ = ("buf", "conn", "parser", "sock")

    def __init__(self, conn: redis.connection.AbstractConnection) -> None:
        conn.connect()  # TCP (+ TLS) + handshake, with redis-py's connect/socket timeouts
        sock = getattr(conn, "_sock", None)  # redis-py has no public accessor for the socket
        if sock is None:
            raise StoreUnavailable("redis-py connected but exposes no socket")
        self.conn = conn
        self.sock = sock
        self.parser = hiredis.Reader()
        self.buf = bytearray(_RECV_BYTES)

    def close(self) -> None:
        try:
            self.conn.disconnect()
        except (redis.RedisError, OSError):
            log.debug("closing a read connection failed", exc_info=True)


def pack_keys(keys: Iterable[bytes]) -> bytes:
    """``keys`` as consecutive RESP bulk strings (the arguments of a command)."""
    return b"".join([b"$%d\r\n%s\r\n" % (len(k), k) for k in keys])


def pack_headed_keys(head: str, tails: Sequence[int]) -> bytes:
    """Bulk strings of the keys ``f"{head}{tail}"`` (one user's pair keys), without building
    each key first: the request path's 500 keys cost one ``str`` per id and one join when the
    ids have one length (a run of keys of equal length shares its ``$<len>`` prefix)."""
    if not head.isascii():  # lengths below count characters: they must be bytes
        return pack_keys([f"{head}{t}".encode() for t in tails])
    texts = list(map(str, tails))
    if not texts:
        return b""
    lengths = set(map(len, texts))
    if len(lengths) == 1:
        pre = f"${len(head) + lengths.pop()}\r\n{head}"
        return (pre + ("\r\n" + pre).join(texts) + "\r\n").encode()
    size = len(head)
    return "".join([f"${size + len(t)}\r\n{head}{t}\r\n" for t in texts]).encode()


def mget_header(n_keys: int) -> bytes:
    """The RESP array header and command name of an ``MGET`` of ``n_keys`` keys."""
    return b"*%d\r\n$4\r\nMGET\r\n" % (n_keys + 1)


def pack_mget(keys: list[bytes]) -> bytes:
    """The RESP encoding of ``MGET keys...``."""
    return mget_header(len(keys)) + pack_keys(keys)


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise StoreTimeout("read deadline passed")
    return left


def _send(c: _Conn, data: bytes, deadline: float) -> None:
    view = memoryview(data)
    while view:
        c.sock.settimeout(_remaining(deadline))
        view = view[c.sock.send(view) :]


def _receive(c: _Conn, deadline: float | None) -> object:
    """One complete reply; ``deadline`` None = the drain timeout per ``recv``."""
    while (reply := c.parser.gets()) is False:
        c.sock.settimeout(DRAIN_TIMEOUT_S if deadline is None else _remaining(deadline))
        n = c.sock.recv_into(c.buf)
        if n == 0:
            raise ConnectionResetError("redis closed the connection")
        c.parser.feed(c.buf, 0, n)
    return reply


class ReadPool:
    """``size`` read connections to ``url``, kept open by a maintenance thread.

    ``mget`` is for one thread at a time (the reader's); the maintenance thread only touches
    connections handed to it. ``close`` stops the thread and closes every connection.
    """

    def __init__(self, url: str, size: int = 4) -> None:
        if size < 1:
            raise ValueError(f"read pool size must be >= 1, got {size}")
        self.size = size
        self._factory = redis.ConnectionPool.from_url(
            url,
            socket_timeout=CONNECT_TIMEOUT_S,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
        )
        self._idle: deque[_Conn] = deque()
        self._repair: queue.SimpleQueue[_Conn | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._live = 0  #: connections that exist: idle, in use or being repaired
        self._closed = threading.Event()
        self.last_error = ""
        self._top_up()  # warm-up: the first read finds open connections
        self._thread = threading.Thread(target=self._maintain, name="redis-read-pool", daemon=True)
        self._thread.start()

    def idle(self) -> int:
        return len(self._idle)

    def mget(self, keys: list[bytes], deadline: float) -> list[bytes | None]:
        """Values of ``keys`` (``None`` = absent), by ``deadline`` (``time.monotonic()``).

        Raises :class:`StoreTimeout` at the deadline and :class:`StoreUnavailable` on any other
        failure, including "no open connection" (immediately: the request path never connects).
        """
        return self.mget_packed(pack_mget(keys), len(keys), deadline)

    def mget_packed(self, data: bytes, n_keys: int, deadline: float) -> list[bytes | None]:
        """:meth:`mget` of a command already packed (:func:`mget_header` + bulk strings of
        ``n_keys`` keys), so callers can pack keys without building them one by one."""
        _remaining(deadline)  # no budget left: fail before touching (and losing) a connection
        try:
            c = self._idle.popleft()
        except IndexError:
            raise StoreUnavailable(
                f"no open redis read connection ({self._live} of {self.size} being repaired)"
                + (f"; last error: {self.last_error}" if self.last_error else "")
            ) from None
        sent = False
        try:
            _send(c, data, deadline)
            sent = True
            reply = _receive(c, deadline)
        except (StoreTimeout, TimeoutError) as exc:
            if sent:  # the reply will come: drain it off the request path
                self._repair.put(c)
            else:  # a half-sent command leaves the stream unusable
                self._drop(c)
            raise StoreTimeout(f"redis MGET of {n_keys} keys missed its deadline") from exc
        except (OSError, hiredis.ProtocolError) as exc:
            self._drop(c)
            raise StoreUnavailable(f"redis read failed: {exc!r}") from exc
        self._keep(c)
        if isinstance(reply, hiredis.ReplyError):
            raise StoreUnavailable(f"redis refused MGET: {reply}")
        if not isinstance(reply, list) or len(reply) != n_keys:
            raise StoreUnavailable(f"unexpected MGET reply of type {type(reply).__name__}")
        return reply

    def _drop(self, c: _Conn) -> None:
        c.close()
        with self._lock:
            self._live -= 1
        self._repair.put(None)  # wake the maintenance thread to open a replacement

    def _open(self) -> _Conn:
        return _Conn(self._factory.connection_class(**self._factory.connection_kwargs))

    def _top_up(self) -> None:
        """Open connections until ``size`` exist; stop at the first failure (retried later)."""
        while not self._closed.is_set():
            with self._lock:
                if self._live >= self.size:
                    return
                self._live += 1
            try:
                self._keep(self._open())
            except (redis.RedisError, OSError, StoreUnavailable) as exc:
                with self._lock:
                    self._live -= 1
                if str(exc) != self.last_error:  # log once per distinct failure
                    log.warning("opening a redis read connection failed", extra={"error": str(exc)})
                self.last_error = str(exc)
                return
            self.last_error = ""

    def _drain(self, c: _Conn) -> None:
        """Read and drop the late reply, then return the connection; close it if that fails."""
        try:
            _receive(c, None)
        except (OSError, hiredis.ProtocolError):
            self._drop(c)
            return
        self._keep(c)

    def _keep(self, c: _Conn) -> None:
        """Back to the idle set, or closed if the pool was closed meanwhile (no leaked socket)."""
        if self._closed.is_set():
            c.close()
        else:
            self._idle.append(c)

    def _maintain(self) -> None:
        while not self._closed.is_set():
            try:
                c = self._repair.get(timeout=RETRY_S)
            except queue.Empty:
                c = None
            if c is not None:
                if self._closed.is_set():  # taken from the queue just as close() ran
                    c.close()
                    break
                self._drain(c)
            self._top_up()

    def close(self) -> None:
        """Stop the maintenance thread (it may be inside one bounded connect) and close all."""
        self._closed.set()
        self._repair.put(None)
        self._thread.join(timeout=CONNECT_TIMEOUT_S + DRAIN_TIMEOUT_S + 1.0)
        while True:
            try:
                c = self._repair.get_nowait()
            except queue.Empty:
                break
            if c is not None:
                c.close()
        while self._idle:
            self._idle.popleft().close()
        self._factory.disconnect()
