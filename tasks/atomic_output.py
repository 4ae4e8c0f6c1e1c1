"""Output directories that appear whole or not at all."""

import contextlib
import os
import shutil
import tempfile
from typing import Iterator


@contextlib.contextmanager
def staged_directory(target: str, flag_name: str = "output_dir",
                     replace: bool = False) -> Iterator[str]:
  """Yields a temporary sibling of `target`, renamed to `target` on success.

  On any error the temporary directory is removed and `target` is untouched. A
  non-empty `target` is refused unless `replace`.
  """
  target = os.path.abspath(target)
  parent = os.path.dirname(target)
  os.makedirs(parent, exist_ok=True)
  if not replace and os.path.isdir(target) and os.listdir(target):
    raise ValueError(f"--{flag_name}={target} exists and is not empty")
  staging = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}-", dir=parent)
  try:
    yield staging
    if os.path.isdir(target):
      shutil.rmtree(target)
    os.replace(staging, target)
  except BaseException:
    shutil.rmtree(staging, ignore_errors=True)
    raise
