r"""What every script does first: quiet TF logs, a private network, clean errors
(and malloc tuned, in the programs that drive TFF rounds).

Import this module before TensorFlow: it must isolate the network while the
process is still single-threaded (see `tff_runtime.isolate_network`).
"""

import logging as std_logging
import os
import signal
import sys
import threading
from typing import Callable, List, Sequence, Tuple, Union

from fed_retrieval.runtime import malloc_tuning
from fed_retrieval.runtime import quiet_environment


def _main_module() -> str:
  """The module run as the program (`python -m NAME`), or ''."""
  return getattr(getattr(sys.modules["__main__"], "__spec__", None), "name", "")


# The programs that drive TFF rounds tune malloc here, while single-threaded
# (`malloc_tuning`): TensorFlow's threads each take a malloc arena of their
# own as they start, which an arena limit set later leaves.
_DRIVES_ROUNDS = ("scripts.benchmark", "scripts.benchmark_round_cost", "scripts.compare",
                  "scripts.train_federated")

quiet_environment.apply()
if _main_module() in _DRIVES_ROUNDS:
  malloc_tuning.tune_this_process()

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags  # pylint: disable=g-import-not-at-top
from absl import logging  # pylint: disable=g-import-not-at-top

from fed_retrieval.algorithms import class_neighbours  # pylint: disable=g-import-not-at-top
from fed_retrieval.runtime import array_service  # pylint: disable=g-import-not-at-top
from fed_retrieval.runtime import tff_runtime  # pylint: disable=g-import-not-at-top
from fed_retrieval.training import progress  # pylint: disable=g-import-not-at-top
from fed_retrieval.training import run_directory  # pylint: disable=g-import-not-at-top

_REMOTE_FLAGS = ("workers", "spreadout_shards", "table_servers")  # Naming other machines.
# The module each flag's servers run (a lost one's restart line).
_SERVER_MODULES = {"spreadout_shards": "scripts.spreadout_shard",
                   "table_servers": "scripts.table_server"}


def _uses_the_host_network(args: Sequence[str]) -> bool:
  """A program that trains on --workers (or --spreadout_shards,
  --table_servers) reaches them over the host's network; `scripts.worker` is
  reached over it. Every other program keeps to a private
  network namespace with only loopback (its local worker unreachable)."""
  return (_main_module() == "scripts.worker" or
          any(a == f"--{flag}" or (a.startswith(f"--{flag}=") and a != f"--{flag}=")
              for a in args for flag in _REMOTE_FLAGS))


if not _uses_the_host_network(sys.argv[1:]):
  tff_runtime.isolate_network()
INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, as a shell reports Ctrl-C.


def _exit_on_interrupt() -> None:
  """Ctrl-C ends the program at once with one line, whatever it is doing.

  Python raises KeyboardInterrupt only between bytecodes of the main thread,
  which can sit for minutes in one TFF or TensorFlow call. So SIGINT is
  blocked in every thread (set before any starts, inherited by all) and one
  thread waits for it. Ending at once loses nothing: checkpoints and results
  are written atomically, and a re-run resumes from the last checkpoint (the
  TFF worker dies with the program). A program started with SIGINT ignored
  (a background job) keeps ignoring it, and a program that is not one of the
  scripts (pytest importing this module) keeps its own Ctrl-C.
  """
  name = _main_module()
  if (signal.getsignal(signal.SIGINT) is signal.SIG_IGN or
      not name.startswith("scripts.") or name == "scripts.worker"):
    return  # (scripts.worker stops its worker on Ctrl-C itself.)
  signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

  def wait() -> None:
    signal.sigwait({signal.SIGINT})
    position = progress.last_position()
    sys.stdout.flush()
    print(f"\ninterrupted{f' at {position}' if position else ''}; re-run the same "
          "command to resume from its last checkpoint", file=sys.stderr, flush=True)
    os._exit(INTERRUPTED_EXIT_CODE)  # pylint: disable=protected-access

  threading.Thread(target=wait, name="interrupt", daemon=True).start()


_exit_on_interrupt()
logging.set_verbosity(logging.WARNING)
# TensorFlow's Python warnings about Keras saving internals ("compiled metrics
# have yet to be built", non-serializable __init__ arguments) are not the
# user's to act on; errors still show.
std_logging.getLogger("tensorflow").setLevel(std_logging.ERROR)


# A titled group of flags --help lists: (title, the --task it serves, a tuple
# of them or None for every task, absl FlagHolders).
HelpGroup = Tuple[str, Union[None, str, Tuple[str, ...]], Sequence[flags.FlagHolder]]
HELP_ARGS = ("-h", "-?", "--help", "-help", "--helpshort")
MAX_HELP_LINES = 100


class UserError(Exception):
  """Bad input (a flag, a file, a directory): reported in one line, exit code 2."""


def help_text(doc: str, own_flags: Sequence[flags.Flag],
              groups: Sequence[HelpGroup], task: str = "movielens") -> str:
  """The script's usage (`doc`) and the flags it reads for `task`, a line each
  with its default: its own first (but those of a group, listed with it), then
  `groups` (a flag shown once). The usage is cut to its first example if the
  whole would pass MAX_HELP_LINES."""
  grouped = {holder.name for _, _, holders in groups for holder in holders}
  # Groups follow one another without blank lines: a script's flags fit a screen.
  own_flags = [flag for flag in own_flags if flag.name not in grouped]
  shown = set()
  flag_lines: List[str] = [""]
  tasks_of = lambda group_task: ((group_task,) if isinstance(group_task, str)
                                 else group_task or (task,))
  other_tasks = sorted({t for _, group_task, _ in groups for t in tasks_of(group_task)
                        if t != task})
  for title, flag_list in [("This script", own_flags)] + [
      (title, [flags.FLAGS[holder.name] for holder in holders])
      for title, group_task, holders in groups if task in tasks_of(group_task)]:
    flag_list = [flag for flag in flag_list if flag.name not in shown]
    if flag_list:
      flag_lines += [f"{title}:"] + [_flag_line(flag) for flag in flag_list]
      shown.update(flag.name for flag in flag_list)
  flag_lines.append("")
  helpfull = "TensorFlow's too: --helpfull."  # One line: --help stays under the cap.
  flag_lines.append(
      f"Another task's flags: --task={'|'.join(other_tasks)} --help; every flag, {helpfull}"
      if other_tasks else f"Every flag, {helpfull}")
  usage = doc.strip().splitlines()
  if len(usage) + len(flag_lines) > MAX_HELP_LINES:
    examples = [i for i, line in enumerate(usage) if line.lstrip().startswith("python -m")]
    usage = usage[:examples[1]] if len(examples) > 1 else usage
    usage.append("(More examples: README.md, Scripts.)")
  return "\n".join(usage + flag_lines)


def _task_in(args: Sequence[str]) -> str:
  """The --task of a command line not parsed yet ('movielens' if none)."""
  for i, arg in enumerate(args):
    if arg.startswith("--task="):
      return arg.split("=", 1)[1]
    if arg == "--task" and i + 1 < len(args):
      return args[i + 1]
  return "movielens"


def _flag_line(flag: flags.Flag) -> str:
  """`  --name=default  the first sentence of its help`."""
  default = flag.default
  if isinstance(default, (list, tuple)):
    default = ",".join(str(v) for v in default)
  name = f"--{flag.name}" + ("" if default is None else f"={default}")
  first_sentence = " ".join(flag.help.split()).split(". ")[0].rstrip(".")
  return f"  {name:<32} {first_sentence}"


def run(main: Callable[[Sequence[str]], None],
        help_groups: Sequence[HelpGroup] = ()) -> None:
  """`absl.app.run` that turns bad input into one clear error line; --help
  lists the script's own flags and `help_groups` (the project flags it reads)."""
  if any(arg in HELP_ARGS for arg in sys.argv[1:]):
    own = flags.FLAGS.flags_by_module_dict().get(sys.argv[0], [])
    print(help_text(sys.modules["__main__"].__doc__ or "", own, help_groups,
                    _task_in(sys.argv[1:])))
    sys.exit(0)
  from tasks.movielens.ratings_io import RatingsFormatError  # pylint: disable=g-import-not-at-top

  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def guarded_main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
      raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    try:
      if "max_worker_restarts" in flags.FLAGS:  # The federated scripts' flags.
        tff_runtime.set_max_worker_restarts(flags.FLAGS.max_worker_restarts)
        if flags.FLAGS.workers:
          tff_runtime.use_remote_workers(flags.FLAGS.workers,
                                         flags.FLAGS.trusted_network)
      if "spreadout_shards" in flags.FLAGS and flags.FLAGS.spreadout_shards:
        if flags.FLAGS.spreadout_search != "approximate":
          raise ValueError("--spreadout_shards hold the approximate index: give "
                           "--spreadout_search=approximate too")
        tff_runtime.refuse_untrusted("spreadout_shards", flags.FLAGS.spreadout_shards,
                                     flags.FLAGS.trusted_network)
        class_neighbours.use_remote_shards(flags.FLAGS.spreadout_shards)
      if "table_servers" in flags.FLAGS and flags.FLAGS.table_servers:
        tff_runtime.refuse_untrusted("table_servers", flags.FLAGS.table_servers,
                                     flags.FLAGS.trusted_network)
        # Imported here: it imports TFF.
        from fed_retrieval.algorithms import served_table  # pylint: disable=g-import-not-at-top
        served_table.use_table_servers(flags.FLAGS.table_servers)
      main(argv)
    except array_service.ServiceLost as e:  # Resumable: exit 3, as a lost worker.
      tff_runtime.exit_with(
          f"error: {e}; start it again (python -m {_SERVER_MODULES[e.flag]} "
          f"--port={e.port}) and re-run the same command to resume from the last "
          "checkpoint")
    except (UserError, RatingsFormatError, ValueError, FileNotFoundError) as e:
      _fail(str(e))
    except OSError as e:  # Permissions, a full disk: name the path.
      _fail(run_directory.describe_write_error(e.filename or "a file", e))
    except (tf.errors.PermissionDeniedError, tf.errors.ResourceExhaustedError) as e:
      _fail(e.message.splitlines()[0])

  def parse_flags(argv: Sequence[str]) -> Sequence[str]:
    """absl's parse, but a flag it refuses (unknown, or a value of the wrong
    type or outside its choices) is one error line and exit 2, not absl's
    two-line 'FATAL Flags parsing error' and exit 1."""
    try:
      return flags.FLAGS(argv)
    except flags.Error as e:
      _fail(str(e))

  app.run(guarded_main, flags_parser=parse_flags)


def _fail(message: str) -> None:
  run_directory.remove_unused_directories()
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)
