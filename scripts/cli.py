"""What every script does first: quiet TF logs, a private network, clean errors.

Import this module before TensorFlow: it must isolate the network while the
process is still single-threaded (see `tff_runtime.isolate_network`).
"""

import logging as std_logging
import os
import sys
from typing import Callable, Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# gRPC (TFF's worker channel) prints fork notices when the worker is started
# from a threaded process; neither they nor its info logs help a user.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags  # pylint: disable=g-import-not-at-top
from absl import logging  # pylint: disable=g-import-not-at-top

from fed_retrieval.runtime import tff_runtime  # pylint: disable=g-import-not-at-top

tff_runtime.isolate_network()
logging.set_verbosity(logging.WARNING)
# TensorFlow's Python warnings about Keras saving internals ("compiled metrics
# have yet to be built", non-serializable __init__ arguments) are not the
# user's to act on; errors still show.
std_logging.getLogger("tensorflow").setLevel(std_logging.ERROR)


class UserError(Exception):
  """Bad input (a flag, a file, a directory): reported in one line, exit code 2."""


def run(main: Callable[[Sequence[str]], None]) -> None:
  """`absl.app.run` that turns bad input into one clear error line."""
  from tasks.movielens.ratings_io import RatingsFormatError  # pylint: disable=g-import-not-at-top

  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from fed_retrieval.training import run_directory  # pylint: disable=g-import-not-at-top

  def guarded_main(argv: Sequence[str]) -> None:
    if len(argv) > 1:
      raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    try:
      if "max_worker_restarts" in flags.FLAGS:  # The federated scripts' flag.
        tff_runtime.set_max_worker_restarts(flags.FLAGS.max_worker_restarts)
      main(argv)
    except (UserError, RatingsFormatError, ValueError, FileNotFoundError) as e:
      _fail(str(e))
    except OSError as e:  # Permissions, a full disk: name the path.
      _fail(run_directory.describe_write_error(e.filename or "a file", e))
    except (tf.errors.PermissionDeniedError, tf.errors.ResourceExhaustedError) as e:
      _fail(e.message.splitlines()[0])

  app.run(guarded_main)


def _fail(message: str) -> None:
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)
