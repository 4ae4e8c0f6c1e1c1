"""Scripts run as fresh processes forked from one that imported their libraries.

A test that runs `python -m scripts.X` pays TensorFlow's and TFF's import
(~6 s) before the script does anything, which made most of the suite's time.
`run_module` gives the same process boundary without it: one server per test
process imports the libraries (never a module that defines a flag, nor runs a
TensorFlow op, so its child starts as a clean interpreter would) and forks a
child per request. The child points fds 0-2 at the caller's files, applies
`env`, changes directory and returns to this module's top level, where it
runs the module as `__main__` as `python -m` does (the script's own import of
`scripts.cli` installs its Ctrl-C handling), then ends with the script's exit
code after its atexit handlers, without the teardown of the interpreter's
modules (a check of that teardown needs a real process). The server dies with
the test process and each child with the server (PR_SET_PDEATHSIG), so
nothing outlives the session.

A child is in the test process's network namespace, as a subprocess would be,
until the script's `scripts.cli` isolates it (the child is single-threaded, as
`tff_runtime.isolate_network` needs). What a fork cannot give needs a real
process (`subprocess`): a setting read when an interpreter or a library starts
(LD_PRELOAD, MALLOC_*, PYTHON*, TF_*), and the teardown of the interpreter.
"""

import ast
import atexit
import ctypes
import errno
import io
import json
import os
import pkgutil
import re
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, Optional, Sequence, Tuple

from fed_retrieval.runtime import quiet_environment
from tests.script_runs import ROOT

_THIRD_PARTY = ("numpy", "pandas", "pyarrow", "scipy", "sklearn", "psutil", "portpicker",
                "grpc", "faiss", "matplotlib", "tensorflow", "tensorflow_federated",
                "tensorflow_recommenders", "dp_accounting")
_PACKAGES = ("fed_retrieval", "losses", "tasks")
_DEFINES_FLAGS = re.compile(r"\bDEFINE_\w*\(|flags\.DEFINE")
_PR_SET_PDEATHSIG = 1


def _top_level_imports(path: str, package_modules: Sequence[str]) -> set:
  """The project modules `path` imports when it is imported (not in functions)."""
  with open(path) as f:
    tree = ast.parse(f.read())
  names = set()
  for node in tree.body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      continue
    for child in ast.walk(node):
      if isinstance(child, ast.Import):
        names.update(alias.name for alias in child.names)
      elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
        names.add(child.module)
        names.update(f"{child.module}.{alias.name}" for alias in child.names)
  return {name for name in names if name in package_modules}


def flag_free_modules() -> list:
  """The project's modules whose import defines no flag, directly or through
  another project module (sorted: packages first)."""
  paths = {}
  for package in _PACKAGES:
    paths[package] = os.path.join(ROOT, package, "__init__.py")
    for info in pkgutil.walk_packages([os.path.join(ROOT, package)], f"{package}."):
      relative = info.name.replace(".", os.sep)
      path = os.path.join(ROOT, relative + (os.sep + "__init__.py" if info.ispkg else ".py"))
      paths[info.name] = path
  imports = {name: _top_level_imports(path, paths) for name, path in paths.items()}
  defines = {name for name, path in paths.items()
             if _DEFINES_FLAGS.search(open(path).read())}
  tainted = set(defines)
  changed = True
  while changed:
    changed = False
    for name, used in imports.items():
      if name not in tainted and used & tainted:
        tainted.add(name)
        changed = True
  return sorted(set(paths) - tainted, key=lambda name: (name.count("."), name))


def _preload() -> None:
  """Imports the libraries; refuses (names it) if that defined a project flag."""
  import importlib  # pylint: disable=g-import-not-at-top
  for name in _THIRD_PARTY:
    importlib.import_module(name)
  for name in flag_free_modules():
    importlib.import_module(name)
  from absl import flags  # pylint: disable=g-import-not-at-top
  defined = [module for module in flags.FLAGS.flags_by_module_dict()
             if module.split(".")[0] in _PACKAGES + ("scripts",)]
  if defined:
    raise RuntimeError(f"the script server's preload defined the flags of {defined}")


def _answer(answers: int, message: dict) -> None:
  os.write(answers, (json.dumps(message) + "\n").encode())


def _reap(answers: int) -> None:
  """Reports each child that ended: {"exited": pid, "returncode": code}."""
  while True:
    try:
      pid, status = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
      return
    if not pid:
      return
    _answer(answers, {"exited": pid, "returncode": os.waitstatus_to_exitcode(status)})


class Transpiled:
  """A file (`path`) to which each child appends, as JSON lines, what autograph
  transpiled for it and the server had not (`report`); the server transpiles
  the lines new since it last looked (`learn`) before it forks a child."""

  def __init__(self, path: str):
    self.path, self._read, self._known = path, 0, set()

  def learn(self) -> None:
    with open(self.path) as f:
      f.seek(self._read)
      text = f.read()
    text = text[:text.rfind("\n") + 1]  # Whole lines only.
    self._read += len(text.encode())
    new = {tuple(json.loads(line)) for line in text.splitlines()} - self._known
    from tests import transpiled  # pylint: disable=g-import-not-at-top  (imports TF)
    transpiled.transpile(new)
    self._known |= new

  def report(self) -> None:
    from tests import transpiled  # pylint: disable=g-import-not-at-top  (imports TF)
    lines = "".join(json.dumps(key) + "\n" for key in set(transpiled.keys()) - self._known)
    if lines:
      fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
      os.write(fd, lines.encode())  # One append: children never interleave.
      os.close(fd)


def _serve(transpiled_path: str) -> Optional[Tuple[dict, Transpiled]]:
  """Forks a child per request line, answering {"pid": pid} at once and
  {"exited": ...} when it ends, until stdin ends; in a child, returns its
  request and the file in which it names what it transpiled."""
  libc = ctypes.CDLL(None, use_errno=True)
  libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
  quiet_environment.apply()  # Before the preload imports TF and gRPC.
  _preload()
  answers = os.dup(1)
  learned = Transpiled(transpiled_path)
  _answer(answers, {"ready": os.getpid()})
  pending = b""
  while True:
    _reap(answers)
    if not select.select([0], [], [], 0.02)[0]:
      continue
    chunk = os.read(0, 1 << 16)
    if not chunk:
      return None  # The test process is done; the children die with this one.
    pending += chunk
    while b"\n" in pending:
      line, pending = pending.split(b"\n", 1)
      request = json.loads(line)
      learned.learn()
      pid = os.fork()
      if pid == 0:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.close(answers)
        _become(request)
        return request, learned
      _answer(answers, {"pid": pid})


def _become(request: dict) -> None:
  """In the child: the caller's directory, environment, argv and files."""
  os.chdir(request["cwd"])
  for key, value in request["env"].items():
    if value is None:
      os.environ.pop(key, None)
    else:
      os.environ[key] = value
  for fd, path in ((0, request["stdin"]), (1, request["stdout"]), (2, request["stderr"])):
    target = os.open(path, os.O_RDONLY if fd == 0 else os.O_WRONLY | os.O_TRUNC)
    os.dup2(target, fd)
    os.close(target)
  sys.stdin = open(0, closefd=False)
  sys.argv = [request["module"] or "-c", *request["args"]]


class ForkedProcess:
  """A child the server forked: what the tests use of `subprocess.Popen`
  (`pid`, `poll`, `wait`, `communicate`, signals, `stdout`/`stderr` read once
  it ended); its output is captured in files under `scratch`. A child started
  with `pipes` has `pipe_in` and `pipe_out` (text files) in place of its
  stdin and stdout, for a conversation with it."""

  def __init__(self, server: "ScriptServer", pid: int, args: list, scratch: str):
    self.pid, self.args, self._server, self._scratch = pid, args, server, scratch
    self.returncode: Optional[int] = None
    self.pipe_in: Optional[io.TextIOBase] = None
    self.pipe_out: Optional[io.TextIOBase] = None

  def _output(self, name: str) -> str:
    with open(os.path.join(self._scratch, name), errors="replace") as f:
      return f.read()

  @property
  def stdout(self) -> io.StringIO:
    return io.StringIO(self._output("stdout"))

  @property
  def stderr(self) -> io.StringIO:
    return io.StringIO(self._output("stderr"))

  def poll(self) -> Optional[int]:
    self.returncode = self._server.returncode_of(self.pid, timeout=0)
    return self.returncode

  def wait(self, timeout: Optional[float] = None) -> int:
    self.returncode = self._server.returncode_of(self.pid, timeout)
    if self.returncode is None:
      raise subprocess.TimeoutExpired(self.args, timeout)
    return self.returncode

  def communicate(self, timeout: Optional[float] = None) -> Tuple[str, str]:
    self.wait(timeout)
    return self._output("stdout"), self._output("stderr")

  def send_signal(self, signum: int) -> None:
    if self.poll() is None:
      os.kill(self.pid, signum)

  def kill(self) -> None:
    self.send_signal(signal.SIGKILL)


def _write_end(path: str, process: ForkedProcess, timeout: float = 60) -> io.TextIOBase:
  """The write end of the named pipe `path` once `process` opened its read
  end; an error, not a hang, if the child ended or never opened it."""
  deadline = time.monotonic() + timeout
  while True:
    try:
      fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO until a reader opens it.
      break
    except OSError as e:
      if e.errno != errno.ENXIO:
        raise
      if process.poll() is not None or time.monotonic() > deadline:
        raise RuntimeError(f"the child {process.pid} never opened its stdin ({path})") from e
      time.sleep(0.01)
  os.set_blocking(fd, True)
  return open(fd, "w")


class ScriptServer:
  """One server process; `start` is `subprocess.Popen` and `run` is
  `subprocess.run(capture_output=True, text=True)` of `python -m module args`
  (or `python -c code args`)."""

  def __init__(self):
    self._process: Optional[subprocess.Popen] = None
    self._scratch = tempfile.TemporaryDirectory(prefix="script_server_")
    self._exits: Dict[int, int] = {}
    self._pending = b""
    self._count = 0
    atexit.register(self.close)

  def _server(self) -> subprocess.Popen:
    if self._process is None or self._process.poll() is not None:
      transpiled_path = os.path.join(self._scratch.name, "transpiled.jsonl")
      open(transpiled_path, "a").close()
      self._process = subprocess.Popen(
          [sys.executable, "-m", "tests.script_server", transpiled_path], cwd=ROOT,
          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
      self._pending = b""
      self._next_answer(timeout=300)
    return self._process

  def _next_answer(self, timeout: Optional[float]) -> Optional[dict]:
    """The server's next line (an exit is recorded and returned), or None.
    Read unbuffered: a buffered line would hide from `select`."""
    while b"\n" not in self._pending:
      if not select.select([self._process.stdout], [], [], timeout)[0]:
        return None
      chunk = os.read(self._process.stdout.fileno(), 1 << 16)
      if not chunk:
        raise RuntimeError("the script server ended")
      self._pending += chunk
    line, self._pending = self._pending.split(b"\n", 1)
    answer = json.loads(line)
    if "exited" in answer:
      self._exits[answer["exited"]] = answer["returncode"]
    return answer

  def returncode_of(self, pid: int, timeout: Optional[float]) -> Optional[int]:
    """The child's exit code, waiting up to `timeout` s (None: for ever)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while pid not in self._exits:
      left = None if deadline is None else max(0.0, deadline - time.monotonic())
      if self._next_answer(left) is None:
        return None
    return self._exits[pid]

  def start(self, args: Sequence[str], module: Optional[str] = None,
            code: Optional[str] = None, cwd: str = ROOT,
            env: Optional[Dict[str, Optional[str]]] = None,
            input: str = "",  # pylint: disable=redefined-builtin
            pipes: bool = False) -> ForkedProcess:
    """Starts `module` (or `code`) with `args` in a forked child reading `input`;
    `env` entries set (a None value unsets) variables of its os.environ;
    `pipes`: its stdin and stdout are pipes (named: the child opens them as
    files) to the handle's `pipe_in` and `pipe_out`, and `input` is unused."""
    server = self._server()
    self._count += 1
    scratch = os.path.join(self._scratch.name, str(self._count))
    os.makedirs(scratch)
    for name, text in (("stdin", input), ("stdout", ""), ("stderr", "")):
      if pipes and name != "stderr":
        os.mkfifo(os.path.join(scratch, name))
        continue
      with open(os.path.join(scratch, name), "w") as f:
        f.write(text)
    server.stdin.write(json.dumps({
        "module": module, "code": code, "args": list(args), "cwd": os.path.abspath(cwd),
        "env": env or {}, **{name: os.path.join(scratch, name)
                             for name in ("stdin", "stdout", "stderr")}}) + "\n")
    server.stdin.flush()
    answer = self._next_answer(timeout=60)
    while answer is not None and "pid" not in answer:
      answer = self._next_answer(timeout=60)
    if answer is None:
      raise RuntimeError("the script server did not start the child")
    # An exit already recorded under this pid was an earlier child's whose pid
    # the kernel has reused (the server answers a start before any exit of it).
    self._exits.pop(answer["pid"], None)
    command = [sys.executable, *(["-m", module] if module else ["-c", code]), *args]
    process = ForkedProcess(self, answer["pid"], command, scratch)
    if pipes:  # In the order the child opens them (each open waits for the other end).
      process.pipe_in = _write_end(os.path.join(scratch, "stdin"), process)
      process.pipe_out = open(os.path.join(scratch, "stdout"))
    return process

  def run(self, args: Sequence[str], timeout: Optional[float] = 900,
          **options) -> subprocess.CompletedProcess:
    """`start`, then its output once it ends (killed after `timeout` s)."""
    process = self.start(args, **options)
    try:
      stdout, stderr = process.communicate(timeout)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()
      raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)

  def close(self) -> None:
    if self._process is not None:
      self._process.stdin.close()
      self._process.wait(timeout=120)
      self._process = None
    self._scratch.cleanup()


def _run_as_main(request: dict, learned: Transpiled) -> None:
  """Runs the request's module or code as `python -m`/`-c` would, then ends the
  process with its exit code after the atexit handlers (and the report of what
  it transpiled), skipping the ~2 s in which an interpreter that imported
  TensorFlow tears its modules down."""
  code = 0
  try:
    if request["module"]:
      runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    else:
      exec(compile(request["code"], "<string>", "exec"),  # pylint: disable=exec-used
           {"__name__": "__main__", "__builtins__": __builtins__})
  except SystemExit as e:  # As the interpreter: None is 0, a message is printed and 1.
    if e.code is None or isinstance(e.code, int):
      code = e.code or 0
    else:
      print(e.code, file=sys.stderr)
      code = 1
  except BaseException:  # pylint: disable=broad-except  (reported as Python does)
    sys.excepthook(*sys.exc_info())
    code = 1
  atexit._run_exitfuncs()  # pylint: disable=protected-access
  learned.report()
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)  # pylint: disable=protected-access


if __name__ == "__main__":
  _request = _serve(sys.argv[1])
  if _request is not None:
    _run_as_main(*_request)
