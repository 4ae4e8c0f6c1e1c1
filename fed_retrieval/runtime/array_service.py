"""An object's methods called from other processes or machines, NumPy arrays
in and out: how the spreadout's index shards (`class_neighbours`) run beside
TFF workers, whose computations cannot keep state between calls.

A message is a 4-byte length, a JSON header (the method, or an error, and
each array's dtype and shape), then the arrays' raw bytes: nothing is
unpickled, so a peer can send numbers and the names of the served methods,
never code. `serve` answers each connection in a thread of its own, the
target's methods one at a time; a `ping` is answered at once (a liveness
probe). A `RemoteObject` waits on its connection in slices of
`heartbeat_seconds`; after each silent slice it opens a new connection and
pings, so a server whose process stopped (SIGSTOP), whose host went down or
whose port closed is named (`ServiceLost`) within two slices, while a long
call into a live one waits as long as it takes.
"""

import concurrent.futures
import json
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np
import portpicker

from fed_retrieval.runtime import wire_bytes

HEARTBEAT_SECONDS = 10.0
_CONNECT_SECONDS = 30.0
_STARTUP_SECONDS = 60.0
_CHUNK = 1 << 22  # Bytes a send hands the kernel at most at once.
_KINDS = "biuf"  # Array kinds a message may hold: numbers only.


class ServiceLost(RuntimeError):
  """A served object stopped answering; the message names its address,
  `port` is its port and `flag` the flag that named it."""

  def __init__(self, message: str, port: int, flag: str):
    super().__init__(message)
    self.port, self.flag = port, flag


def parse_address(address: str, flag: str) -> Tuple[str, int]:
  """'host:port' (IPv6 as '[::1]:port') -> (host, port); errors name `flag`."""
  host, sep, port = address.strip().rpartition(":")
  host = host.strip("[]")
  if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise ValueError(f"--{flag}: '{address}' is not host:port")
  return host, int(port)


def addresses(given: Sequence[str], flag: str) -> List[str]:
  """`given` host:port addresses written alike ('[::1]:port' for IPv6), each
  checked, none twice; errors name `flag`."""
  written = [f"[{h}]:{p}" if ":" in h else f"{h}:{p}"
             for h, p in (parse_address(a, flag) for a in given)]
  if len(set(written)) != len(written):
    raise ValueError(f"--{flag}: an address is given twice ({','.join(given)})")
  return written


def _ready(sock: socket.socket, writing: bool, seconds: Optional[float]) -> bool:
  """Whether `sock` can be written (`writing`) or read within `seconds` (None: ever)."""
  readable, writable, _ = select.select([] if writing else [sock],
                                        [sock] if writing else [], [], seconds)
  return bool(writable or readable)


class _Connection:
  """A non-blocking socket sending and receiving messages; `wait(sock,
  writing)` returns once the socket is ready (the caller's liveness rule).
  Given the peer's `address`, the messages' bytes are counted (`wire_bytes`)."""

  def __init__(self, sock: socket.socket, wait: Callable[[socket.socket, bool], None],
               address: Optional[str] = None):
    sock.setblocking(False)
    self.sock, self._wait, self._address = sock, wait, address

  def _count(self, sent: int, received: int) -> None:
    if self._address is not None:
      wire_bytes.add(self._address, sent, received)

  def send(self, head: dict, arrays: Sequence[np.ndarray]) -> None:
    arrays = [np.array(a, order="C", copy=False) for a in arrays]  # 0-d stays 0-d.
    head = dict(head, arrays=[[a.dtype.str, list(a.shape)] for a in arrays])
    text = json.dumps(head).encode()
    self._count(4 + len(text) + sum(a.nbytes for a in arrays), 0)
    for part in [struct.pack("!I", len(text)) + text] + [a.reshape(-1).view(np.uint8)
                                                          for a in arrays]:
      view = memoryview(part).cast("B")
      while view:
        try:
          view = view[self.sock.send(view[:_CHUNK]):]
        except BlockingIOError:
          self._wait(self.sock, True)

  def _exactly(self, size: int) -> bytearray:
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
      try:
        count = self.sock.recv_into(view[got:], min(size - got, _CHUNK))
      except BlockingIOError:
        self._wait(self.sock, False)
        continue
      if count == 0:
        raise ConnectionError("the connection closed")
      got += count
    return buffer

  def receive(self) -> Tuple[dict, List[np.ndarray]]:
    (size,) = struct.unpack("!I", self._exactly(4))
    try:
      head = json.loads(self._exactly(size))
      specs = [(np.dtype(dtype), [int(n) for n in shape])
               for dtype, shape in head.pop("arrays")]
    except (AttributeError, KeyError, TypeError) as e:
      raise ValueError(f"a malformed message ({e})") from e
    arrays = []
    for dtype, shape in specs:
      if dtype.kind not in _KINDS:
        raise ValueError(f"an array of dtype {dtype} (numbers only)")
      count = int(np.prod(shape, dtype=np.int64))
      arrays.append(np.frombuffer(self._exactly(count * dtype.itemsize), dtype
                                  ).reshape(shape))
    self._count(0, 4 + size + sum(a.nbytes for a in arrays))
    return head, arrays


def _wait_forever(sock: socket.socket, writing: bool) -> None:
  _ready(sock, writing, None)


def serve(port: int, target: Any, methods: Sequence[str],
          ready: Optional[Callable[[], None]] = None) -> None:
  """Answers calls of `target`'s `methods` (each takes and returns arrays) on
  `port`, every interface, until the process ends; `ready()` once listening."""
  if socket.has_dualstack_ipv6():
    listener = socket.create_server(("::", port), family=socket.AF_INET6,
                                    dualstack_ipv6=True)
  else:
    listener = socket.create_server(("", port))
  lock = threading.Lock()

  def reply(method: Any, arrays: List[np.ndarray]) -> Tuple[dict, list]:
    if method == "ping":
      return {}, []
    try:
      if method not in methods:
        raise ValueError(f"no method '{method}' (served: {', '.join(methods)})")
      with lock:
        return {}, list(getattr(target, method)(*arrays))
    except Exception as e:  # pylint: disable=broad-except
      return {"error": f"{type(e).__name__}: {e}"}, []

  def answer(sock: socket.socket) -> None:
    connection = _Connection(sock, _wait_forever)
    with sock:
      try:
        while True:
          head, arrays = connection.receive()
          connection.send(*reply(head.get("method"), arrays))
      except (OSError, ValueError):
        return  # The caller went away (or spoke garbage): its connection ends.

  if ready:
    ready()
  while True:
    sock, _ = listener.accept()
    threading.Thread(target=answer, args=(sock,), daemon=True).start()


def serve_until_stopped(port: int, target: Any, methods: Sequence[str], what: str
                        ) -> None:
  """A server script's main: `serve`s `target` on `port` (a flag) until Ctrl-C
  or SIGTERM, saying so once listening ("<what> listening on port P, ...");
  a bad or busy port is one line and exit 2."""
  def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)

  if not 0 < port < 65536:
    fail(f"--port must lie in 1..65535, got {port}")
  signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
  try:
    serve(port, target, methods, ready=lambda: print(
        f"{what} listening on port {port}, every interface; stop it with Ctrl-C or "
        "SIGTERM", file=sys.stderr, flush=True))
  except OSError as e:
    fail(f"--port={port}: {e.strerror or e}; is the port in use?")
  except KeyboardInterrupt:
    pass


class RemoteObject:
  """The object `serve`d at `address`: `call(method, *arrays)` -> its arrays.
  `what` names it in errors ("the spreadout index shard")."""

  def __init__(self, address: str, what: str, flag: str,
               heartbeat_seconds: float = HEARTBEAT_SECONDS):
    (self.address,) = addresses([address], flag)
    self.host, self.port = parse_address(self.address, flag)
    self._what, self._flag = what, flag
    self._heartbeat = heartbeat_seconds
    self._connection: Optional[_Connection] = None

  def _lost(self, why: str) -> ServiceLost:
    return ServiceLost(f"the {self._what} at {self.address} stopped answering ({why})",
                       self.port, self._flag)

  def _open(self, timeout: float) -> socket.socket:
    return socket.create_connection((self.host, self.port), timeout=timeout)

  def _wait(self, sock: socket.socket, writing: bool) -> None:
    """Returns once `sock` is ready; a silent slice is followed by a probe."""
    while not _ready(sock, writing, self._heartbeat):
      self.probe()

  def probe(self) -> None:
    """Raises `ServiceLost` unless the server answers a ping on a new
    connection within `heartbeat_seconds`."""
    try:
      with self._open(self._heartbeat) as sock:
        deadline = time.monotonic() + self._heartbeat

        def until_deadline(sock_, writing):
          if not _ready(sock_, writing, max(deadline - time.monotonic(), 0)):
            raise TimeoutError()

        connection = _Connection(sock, until_deadline, self.address)
        connection.send({"method": "ping"}, [])
        connection.receive()
    except (TimeoutError, socket.timeout):
      raise self._lost(f"no answer within {self._heartbeat:g} s: its process "
                       "stopped, or its host is down or unreachable") from None
    except OSError:
      raise self._lost("its connection failed") from None

  def connect(self) -> None:
    """Opens the connection, or says in one line that nothing answers."""
    if self._connection is not None:
      return
    try:
      self._connection = _Connection(self._open(_CONNECT_SECONDS), self._wait, self.address)
    except OSError as e:
      raise ValueError(f"--{self._flag}: no {self._what} answers at {self.address} "
                       f"({e.strerror or e})") from e

  def call(self, method: str, *arrays: np.ndarray) -> List[np.ndarray]:
    self.connect()
    try:
      self._connection.send({"method": method}, arrays)
      head, result = self._connection.receive()
    except OSError:
      self.close()
      raise self._lost("its connection failed") from None
    if "error" in head:
      raise RuntimeError(f"the {self._what} at {self.address}: {head['error']}")
    return result

  def close(self) -> None:
    connection, self._connection = self._connection, None
    if connection is not None:
      connection.sock.close()


def call_each(calls: Sequence[Callable[[], Any]]) -> List[Any]:
  """Each of `calls` at once (a thread each; remote calls wait on sockets), in
  order; one call runs in this thread."""
  if len(calls) == 1:
    return [calls[0]()]
  with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
    return [f.result() for f in [pool.submit(c) for c in calls]]


def await_answer(address: str, process: Any) -> None:
  """Returns once the server at `address` that `process` (a Popen-like
  handle) started answers; an error if it exits or stays silent."""
  deadline = time.monotonic() + _STARTUP_SECONDS
  remote = RemoteObject(address, "server", "address", heartbeat_seconds=1.0)
  while True:
    if process.poll() is not None:
      raise RuntimeError(f"the server for {address} exited with code {process.returncode}")
    try:
      remote.probe()
      return
    except ServiceLost:
      if time.monotonic() > deadline:
        raise RuntimeError(f"the server for {address} did not answer in "
                           f"{_STARTUP_SECONDS:.0f} s") from None
      time.sleep(0.1)


class LocalServers:
  """`count` servers on this machine, each `python -m module --port=P`, tied to
  this process's lifetime (the kernel kills them if it dies): what servers on
  as many machines do, measured on one."""

  def __init__(self, module: str, count: int, prepare: Callable[[], None]):
    self._module, self._count, self._prepare = module, count, prepare
    self.processes: List[subprocess.Popen] = []
    self.addresses: List[str] = []

  def __enter__(self) -> "LocalServers":
    try:
      for _ in range(self._count):
        port = portpicker.pick_unused_port()
        self.processes.append(subprocess.Popen(
            [sys.executable, "-m", self._module, f"--port={port}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, preexec_fn=self._prepare, close_fds=True))
        self.addresses.append(f"localhost:{port}")
      for process, address in zip(self.processes, self.addresses):
        await_answer(address, process)
    except BaseException:
      self.stop()
      raise
    return self

  def stop(self) -> None:
    for process in self.processes:
      if process.poll() is None:
        process.terminate()
    for process in self.processes:
      try:
        process.wait(timeout=5)
      except subprocess.TimeoutExpired:
        process.kill()
        process.wait()

  def __exit__(self, *exc_info) -> None:
    self.stop()
