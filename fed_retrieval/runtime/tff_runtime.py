"""A local TFF execution context whose C++ worker can neither be orphaned nor reached.

TFF's default context starts `tensorflow_federated/data/worker_binary` with the
parent's stdout and only stops it from a `__del__` that does not run at exit, so
the worker outlives the program and keeps pipes open. Here the worker is started
by us instead:
- with PR_SET_PDEATHSIG=SIGKILL, so the kernel kills it when the parent dies in
  any way (normal exit, exception, Ctrl-C, SIGKILL);
- with stdout/stderr to a log file (or /dev/null), never the parent's pipes;
- stopped explicitly by `LocalWorker.stop`, by a context manager and at exit;
- watched: if it dies otherwise, the program ends at once with one error line
  and exit code 3 (calls into a dead worker would block forever), or, inside
  `worker_restarts_allowed()`, its channel is closed so that the blocked call
  raises, and the death is kept for `take_worker_death()`: the run loop then
  starts a new worker and resumes from its last checkpoint.
The worker binary has no bind-address flag and listens on all interfaces. Call
`isolate_network()` first thing in a program, while it is single-threaded: it
moves the process into a private network namespace that has only loopback, so
the worker is unreachable from outside. (Nothing in this project uses the
network at run time.)
Both sides of the rounds' transfers run with glibc malloc keeping large freed
buffers (`malloc_tuning`: XC rounds 222-233 -> 169-187 ms), the worker's
ops each use their share of the cores (`worker_threads`: a round's shards
run at once; H+S rounds on ml-latest-small 1.7x faster), and each
computation is created in the worker once, not every call
(`computation_cache`: batch-softmax rounds 50.8 -> 46.2 ms).
"""

import atexit
import contextlib
import ctypes
import fcntl
import functools
import gc
import ipaddress
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Iterator, List, Optional, Sequence

from absl import logging
import grpc
import portpicker

from fed_retrieval.runtime import array_service
from fed_retrieval.runtime import malloc_tuning
from fed_retrieval.runtime import worker_threads

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_GRPC_OPTIONS = [
    ("grpc.max_message_length", 2 * 1000 * 1000 * 1000),
    ("grpc.max_receive_message_length", 2 * 1000 * 1000 * 1000),
    ("grpc.max_send_message_length", 2 * 1000 * 1000 * 1000),
]
# A local worker is polled from its start: gRPC's first reconnect after the
# port refused waits 1 s by default, which was most of a start (1.0 -> 0.16 s).
_LOCAL_GRPC_OPTIONS = _GRPC_OPTIONS + [("grpc.initial_reconnect_backoff_ms", 20)]
_STARTUP_TIMEOUT_SECONDS = 120.0
_REMOTE_CONNECT_SECONDS = 30.0
# Every this many seconds, each remote worker must accept a new connection
# within as many: a worker that stops answering is named within twice this.
HEARTBEAT_SECONDS = 10.0
WORKER_DIED_EXIT_CODE = 3

_network_isolated = False
_restarts_allowed = False  # Inside `worker_restarts_allowed()`.
_max_worker_restarts = 3
_deaths: list = []  # Deaths of workers not yet taken by `take_worker_death`.
_exiting = threading.Lock()  # Held by the thread in `exit_with`.


class WorkerDeath:
  """How a worker ended: its pid, port and exit code (negative: the signal)."""

  def __init__(self, pid: int, port: int, code: int):
    self.pid, self.port, self.code = pid, port, code

  def describe(self) -> str:
    """'killed by signal SIGKILL, most often ...' or 'exit code 1'."""
    if self.code >= 0:
      return f"exit code {self.code}"
    name = signal.Signals(-self.code).name
    why = {"SIGKILL": ", most often the kernel's out-of-memory killer: lower "
                      "--clients_per_round or the model size",
           "SIGSEGV": ", a crash inside TFF's C++ runtime"}.get(name, "")
    return f"killed by signal {name}{why}"


def max_worker_restarts() -> int:
  """How often a run replaces a dead worker before it gives up (default 3)."""
  return _max_worker_restarts


def set_max_worker_restarts(count: int) -> None:
  global _max_worker_restarts
  if count < 0:
    raise ValueError(f"--max_worker_restarts must be >= 0, got {count}")
  _max_worker_restarts = count


def exit_with(line: str) -> None:
  """Ends the program at once with `line` as the last line on stderr and
  WORKER_DIED_EXIT_CODE (a worker or a spreadout shard lost; a re-run
  resumes): also from a watcher thread, where raising would end only that
  thread. Other threads' later output (a round's progress line) is dropped:
  a line they write in one write (`progress.ProgressLines`) comes whole
  before `line` or not at all; of two threads ending the program, one line
  is written."""
  with _exiting:
    sys.stdout.flush()
    stderr = os.dup(2)
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    os.write(stderr, (line + "\n").encode())
    os._exit(WORKER_DIED_EXIT_CODE)  # pylint: disable=protected-access


def worker_died_message(death: WorkerDeath) -> str:
  return (f"error: the TFF worker (pid {death.pid}, port {death.port}) died "
          f"unexpectedly ({death.describe()}); re-run the same command to resume "
          "from the last checkpoint")


@contextlib.contextmanager
def worker_restarts_allowed() -> Iterator[None]:
  """Within the block, a worker that dies does not end the program: its calls
  fail and `take_worker_death()` says what happened."""
  global _restarts_allowed
  previous, _restarts_allowed = _restarts_allowed, True
  try:
    yield
  finally:
    _restarts_allowed = previous


def take_worker_death() -> Optional[WorkerDeath]:
  """The oldest unreported worker death (and forgets it), or None."""
  return _deaths.pop(0) if _deaths else None


def _libc() -> ctypes.CDLL:
  return ctypes.CDLL(None, use_errno=True)


def _bring_loopback_up() -> None:
  with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    request = struct.pack("16sH", b"lo", 0)
    flags = struct.unpack("16sH", fcntl.ioctl(s, _SIOCGIFFLAGS, request))[1]
    fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))


def isolate_network() -> bool:
  """Moves this process into a private network namespace with only loopback.

  Must run before any thread starts (namespaces are per thread until then
  inherited). Returns False (and logs why) where the kernel refuses, e.g. no
  privileges and no user namespaces; the program then still runs, with the
  worker listening on all interfaces of this machine.
  """
  global _network_isolated
  if _network_isolated:
    return True
  libc = _libc()
  for flags in (_CLONE_NEWNET, _CLONE_NEWUSER | _CLONE_NEWNET):
    if libc.unshare(flags) == 0:
      try:
        _bring_loopback_up()
      except OSError as e:
        logging.warning("Private network namespace without loopback: %s", e)
        return False
      _network_isolated = True
      return True
  logging.warning("Could not isolate the network (%s); the TFF worker will "
                  "listen on all interfaces.", os.strerror(ctypes.get_errno()))
  return False


def _release_tff_default_context() -> None:
  """Drops TFF's import-time default context while modules are still alive.

  Its worker manager only cleans up in `__del__`, which otherwise runs during
  interpreter teardown and fails noisily.
  """
  if "tensorflow_federated" not in sys.modules:
    return
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.context_stack import runtime_error_context  # pylint: disable=g-import-not-at-top
  context_stack_impl.context_stack.set_default_context(
      runtime_error_context.RuntimeErrorContext())
  gc.collect()


atexit.register(_release_tff_default_context)


def worker_binary_path() -> str:
  import tensorflow_federated  # pylint: disable=g-import-not-at-top
  path = os.path.join(os.path.dirname(tensorflow_federated.__file__), "data",
                      "worker_binary")
  if not os.path.isfile(path):
    raise RuntimeError(f"TFF worker binary not found at {path}")
  return path


def die_with_parent() -> None:
  """In a child before exec (`preexec_fn`): the kernel kills it when this
  process dies, however it dies."""
  _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def prepare_child() -> None:
  """In a child (a worker, a spreadout shard) before exec: killed when this
  process dies; its own process group, so a terminal's Ctrl-C reaches only
  the program (which decides how to end); SIGINT neither ignored nor blocked
  (the program may have either), since `stop` sends it."""
  die_with_parent()
  os.setpgrp()
  signal.signal(signal.SIGINT, signal.SIG_DFL)  # Not ignored, as in a background job.
  signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class LocalWorker:
  """One TFF C++ worker process, tied to the lifetime of this process, on
  `port` (default: a free one)."""

  def __init__(self, log_path: Optional[str] = None,
               max_concurrent_computation_calls: int = -1,
               port: Optional[int] = None):
    self._log_path = log_path
    self._max_calls = max_concurrent_computation_calls
    self._process: Optional[subprocess.Popen] = None
    self._channel: Optional[grpc.Channel] = None
    self._fixed_port = port
    self.port: Optional[int] = None

  @property
  def pid(self) -> Optional[int]:
    return self._process.pid if self._process else None

  @property
  def address(self) -> str:
    """Where the started worker answers (its calls' bytes counted by it: `wire_bytes`)."""
    return f"localhost:{self.port}"

  @property
  def running(self) -> bool:
    return self._process is not None and self._process.poll() is None

  def start(self):
    """Starts the worker and returns its stub (a `value_bytes.BytesStub`)
    once it answers."""
    from fed_retrieval.runtime import value_bytes  # pylint: disable=g-import-not-at-top
    self.port = self._fixed_port or portpicker.pick_unused_port()
    log = open(self._log_path, "ab") if self._log_path else subprocess.DEVNULL
    try:
      self._process = subprocess.Popen(
          [worker_binary_path(), f"--port={self.port}",
           f"--max_concurrent_computation_calls={self._max_calls}"],
          stdin=subprocess.DEVNULL, stdout=log, stderr=log,
          env=worker_threads.with_intra_op_threads(malloc_tuning.worker_environment()),
          preexec_fn=prepare_child, close_fds=True)
    finally:
      if log is not subprocess.DEVNULL:
        log.close()
    atexit.register(self.stop)
    self._channel = grpc.insecure_channel(self.address, _LOCAL_GRPC_OPTIONS)
    stub = value_bytes.BytesStub(self._channel, self.address)
    deadline = time.monotonic() + _STARTUP_TIMEOUT_SECONDS
    while not stub.is_ready:
      if self._process.poll() is not None:
        raise RuntimeError(f"TFF worker exited with code {self._process.returncode}"
                           f" (log: {self._log_path or 'discarded'})")
      if time.monotonic() > deadline:
        self.stop()
        raise RuntimeError("TFF worker did not become ready in "
                           f"{_STARTUP_TIMEOUT_SECONDS:.0f} s")
    threading.Thread(target=self._exit_if_it_dies, args=(self._process,),
                     name="tff-worker-watchdog", daemon=True).start()
    return stub

  def _exit_if_it_dies(self, process: subprocess.Popen) -> None:
    """Ends the program when the worker dies unless `stop` stopped it, or,
    where restarts are allowed, makes its calls fail.

    A call into a dead worker blocks forever (gRPC waits for it to come back),
    so the program would hang at 0% CPU. Closing the channel makes that call
    raise; without a restart, exiting is the way out that loses nothing:
    checkpoints are atomic and a re-run resumes.
    """
    code = process.wait()
    if self._process is not process:  # Stopped on purpose.
      return
    death = WorkerDeath(process.pid, self.port, code)
    if _restarts_allowed:
      self._process = None
      _deaths.append(death)
      self._channel.close()
      return
    exit_with(worker_died_message(death))

  def stop(self) -> None:
    """Stops the worker (idempotent)."""
    process, self._process = self._process, None
    if process is None or process.poll() is not None:
      return
    process.send_signal(signal.SIGINT)
    try:
      process.wait(timeout=5)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()


def worker_context(stub):
  """A synchronous TFF context that runs on the one worker of `stub`."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  return _context(stub, tff.framework.SyncExecutionContext)


def _context(stub, context_class):
  """A TFF execution context (sync or async) that runs on one worker's stub."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from fed_retrieval.runtime import computation_cache  # pylint: disable=g-import-not-at-top
  malloc_tuning.tune_this_process()  # Its rounds' buffers (malloc_tuning).

  def executor_stack(cardinalities):
    # Server-only computations (e.g. `initialize`) carry no client count.
    cardinalities = dict(cardinalities)
    cardinalities.setdefault(tff.CLIENTS, 0)
    executor = computation_cache.ComputationCachingRemoteExecutor(stub)
    executor.set_cardinalities(cardinalities)
    return executor

  return context_class(
      executor_fn=tff.framework.ResourceManagingExecutorFactory(executor_stack),
      compiler_fn=tff.backends.native.desugar_and_transform_to_native,
      transform_args=tff.tensorflow.transform_args,
      transform_result=tff.tensorflow.transform_result)


def set_local_execution_context(log_path: Optional[str] = None) -> LocalWorker:
  """Starts a worker and makes it TFF's default execution context."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  worker = LocalWorker(log_path)
  stub = worker.start()
  tff.framework.set_default_context(_context(stub, tff.framework.SyncExecutionContext))
  return worker


def set_workers_execution_context(stubs: Sequence) -> None:
  """TFF's own distributed engine: a computation's clients split across the
  workers behind `stubs`, their results merged (a mergeable-form context over
  one async context per worker)."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  tff.framework.set_default_context(
      tff.backends.native.create_mergeable_comp_execution_context(
          [_context(stub, tff.framework.AsyncExecutionContext) for stub in stubs]))


# Remote channels: a worker that dies closes its connection, which the channel
# sees at once; a worker that stops (SIGSTOP, a hung host) or vanishes (host
# down, network cut) leaves it open, and `RemoteWorkers`' heartbeat finds it.
# Keepalive pings stay no more often than a gRPC server accepts; an idle
# channel never times out by itself.
_REMOTE_GRPC_OPTIONS = _GRPC_OPTIONS + [
    ("grpc.keepalive_time_ms", 300_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.client_idle_timeout_ms", 2 ** 31 - 1),
]
_LOOPBACK_NAMES = ("localhost", "ip6-localhost")


def is_loopback(host: str) -> bool:
  """Whether `host` is this machine's loopback (a name or an address)."""
  if host in _LOOPBACK_NAMES:
    return True
  try:
    return ipaddress.ip_address(host).is_loopback
  except ValueError:
    return False


class RemoteWorkers:
  """TFF workers started elsewhere (`scripts.worker`) at host:port addresses,
  used together: a round's clients are split across them. A worker that
  stops answering ends the program with one line naming it (exit code 3): at
  once when its connection fails (the process died), within
  2 * `heartbeat_seconds` when it no longer accepts a new connection (its
  process stopped, its host down or cut off). A remote worker cannot be
  restarted from here, and a call into it would otherwise wait forever; a
  re-run resumes from the last checkpoint."""

  def __init__(self, addresses: Sequence[str],
               heartbeat_seconds: float = HEARTBEAT_SECONDS):
    self.addresses = array_service.addresses(addresses, "workers")
    self.connected = False
    self.contexts: list = []  # One per worker (`worker_contexts`).
    self._channels: List[grpc.Channel] = []
    self._heartbeat_seconds = heartbeat_seconds
    self._closed = threading.Event()

  def connect(self) -> None:
    from fed_retrieval.runtime import value_bytes  # pylint: disable=g-import-not-at-top
    stubs = []
    for address in self.addresses:
      channel = grpc.insecure_channel(address, _REMOTE_GRPC_OPTIONS)
      try:
        grpc.channel_ready_future(channel).result(timeout=_REMOTE_CONNECT_SECONDS)
      except grpc.FutureTimeoutError as e:
        raise ValueError(
            f"--workers: no TFF worker answers at {address} (waited "
            f"{_REMOTE_CONNECT_SECONDS:.0f} s; start one there with python -m "
            f"scripts.worker --port={address.rsplit(':', 1)[1]})") from e
      self._channels.append(channel)
      channel.subscribe(functools.partial(self._watch, address), try_to_connect=False)
      stubs.append(value_bytes.BytesStub(channel, address))
    set_workers_execution_context(stubs)
    self.contexts = [worker_context(stub) for stub in stubs]
    self.connected = True
    atexit.register(self.close)
    threading.Thread(target=self._heartbeat, name="remote-worker-heartbeat",
                     daemon=True).start()

  def _watch(self, address: str, state: grpc.ChannelConnectivity) -> None:
    if not self.connected or state in (grpc.ChannelConnectivity.READY,
                                       grpc.ChannelConnectivity.CONNECTING):
      return
    exit_with(remote_worker_lost_message(address, "its connection failed"))

  def _heartbeat(self) -> None:
    """Opens a new connection to each worker every `heartbeat_seconds`. The
    HTTP/2 handshake needs the worker's process (a stopped one's kernel still
    accepts TCP), and a host that vanished accepts nothing; the open channel
    sees neither, its calls waiting forever."""
    while not self._closed.wait(self._heartbeat_seconds):
      for address in self.addresses:
        probe = grpc.insecure_channel(address)
        try:
          grpc.channel_ready_future(probe).result(timeout=self._heartbeat_seconds)
        except grpc.FutureTimeoutError:
          if self.connected:
            exit_with(remote_worker_lost_message(
                address, f"no new connection within {self._heartbeat_seconds:g} s: "
                "its process stopped, or its host is down or unreachable"))
        finally:
          probe.close()

  def close(self) -> None:
    self.connected = False
    self._closed.set()
    for channel in self._channels:
      channel.close()


def remote_worker_lost_message(address: str, why: str) -> str:
  return (f"error: the TFF worker at {address} stopped answering ({why}); start it "
          f"again (python -m scripts.worker --port={address.rsplit(':', 1)[1]}) and "
          "re-run the same command to resume from the last checkpoint")


def refuse_untrusted(flag: str, addresses: Sequence[str], trusted_network: bool) -> None:
  """Refuses `addresses` (host:port) off this machine unless `trusted_network`:
  the servers there (TFF workers, spreadout shards) are neither encrypted nor
  authenticated."""
  exposed = [a for a in addresses
             if not is_loopback(array_service.parse_address(a, flag)[0])]
  if exposed and not trusted_network:
    raise ValueError(
        f"--{flag}: {', '.join(exposed)} is not on this machine, and its port is "
        "neither encrypted nor authenticated; run it on a private network and say "
        "so with --trusted_network, or reach it through an SSH tunnel (ssh -N -L "
        f"PORT:localhost:PORT host, then --{flag}=localhost:PORT)")


def use_remote_workers(addresses: Sequence[str], trusted_network: bool) -> None:
  """Runs train on the TFF workers at `addresses` (connected on first use).

  Their gRPC port has neither encryption nor authentication: a worker on
  another host is refused unless `trusted_network` says the network between
  the hosts is private (README: a private network or SSH tunnels)."""
  global _remote_workers
  workers = RemoteWorkers(addresses)
  refuse_untrusted("workers", workers.addresses, trusted_network)
  _remote_workers = workers


_shared_worker: Optional[LocalWorker] = None
_remote_workers: Optional[RemoteWorkers] = None  # Set by `use_remote_workers`.
_local_contexts: list = []  # Set by `several_local_workers`.


def using_remote_workers() -> bool:
  return _remote_workers is not None


def worker_contexts() -> list:
  """A context per worker, for a program that sends each worker calls of its
  own (a sub-model process's clients): the remote workers', or those of
  `several_local_workers`; [] on the one local worker, whose context is the
  default one."""
  return _remote_workers.contexts if _remote_workers is not None else _local_contexts


class OneCallAtATime:
  """A worker's context whose calls, and values it makes (`worker_values`),
  wait for those of the others sharing `turn` to end: each worker's CPU
  seconds measured with no other worker's work beside it on the cores
  (`benchmark_round_cost --one_call_at_a_time`)."""

  def __init__(self, context, turn: threading.Lock):
    self._context, self.turn = context, turn

  @property
  def executor_factory(self):
    return self._context.executor_factory

  def invoke(self, computation, arg):
    with self.turn:
      return self._context.invoke(computation, arg)


@contextlib.contextmanager
def several_local_workers(count: int, one_call_at_a_time: bool = False
                          ) -> Iterator[List[LocalWorker]]:
  """`count` local workers used together for a block, as remote ones are (a
  round's clients split across them): what N machines do, measured on one
  (`one_call_at_a_time`: their calls in turn, `OneCallAtATime`)."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  global _local_contexts
  previous = tff.framework.get_context_stack().current
  workers = [LocalWorker() for _ in range(count)]
  try:
    stubs = [worker.start() for worker in workers]
    set_workers_execution_context(stubs)
    _local_contexts = [worker_context(stub) for stub in stubs]
    if one_call_at_a_time:
      lock = threading.Lock()
      _local_contexts = [OneCallAtATime(c, lock) for c in _local_contexts]
    yield workers
  finally:
    _local_contexts = []
    tff.framework.set_default_context(previous)
    for worker in workers:
      worker.stop()


def ensure_local_execution_context(log_path: Optional[str] = None) -> LocalWorker:
  """The process-wide worker and context, started on first use (stopped at exit)."""
  global _shared_worker
  if _shared_worker is None or not _shared_worker.running:
    _shared_worker = set_local_execution_context(log_path)
  return _shared_worker


def ensure_execution_context() -> None:
  """The context runs use: the remote workers' (`use_remote_workers`),
  connected on first use, or the process-wide local worker's."""
  if _remote_workers is None:
    ensure_local_execution_context()
  elif not _remote_workers.connected:
    _remote_workers.connect()


@contextlib.contextmanager
def execution_context() -> Iterator[None]:
  """`ensure_execution_context` for a block; a local worker stops after it
  (remote workers serve the program's next runs too)."""
  if _remote_workers is not None:
    ensure_execution_context()
    yield
    return
  with local_execution_context():
    yield


@contextlib.contextmanager
def local_execution_context(log_path: Optional[str] = None) -> Iterator[LocalWorker]:
  """The shared worker's context for a block; the worker stops on exit (the
  one running then: a restart inside the block replaces the first)."""
  worker = ensure_local_execution_context(log_path)
  try:
    yield worker
  finally:
    worker.stop()
    if _shared_worker is not None:
      _shared_worker.stop()
