"""Program-state checkpoints that cannot be torn, and a resume that skips bad ones.

`tff.program.FileProgramStateManager` writes `program_state_N/` in place: a
kill or a full disk mid-write leaves a torn version that later saves of N
refuse to overwrite (`ProgramStateExistsError`), wedging the run directory.
Here a version is written beside the others under a name the manager does not
list (`staging_program_state_N`) and renamed into place only when complete; on
resume, a version that cannot be read is renamed to
`unreadable_program_state_N` (kept for inspection, with a warning naming it)
and the newest readable one is used.
"""

import asyncio
import os
import shutil
from typing import Any, Optional, Tuple

from absl import logging
import tensorflow_federated as tff

STAGING_PREFIX = "staging_"
UNREADABLE_PREFIX = "unreadable_"


class AtomicFileProgramStateManager(tff.program.FileProgramStateManager):
  """A `FileProgramStateManager` whose versions appear whole or not at all."""

  async def save(self, program_state: Any, version: int) -> None:
    final_path = self._get_path_for_version(version)
    root, name = os.path.split(final_path)
    staging_root = os.path.join(root, STAGING_PREFIX + name)
    shutil.rmtree(staging_root, ignore_errors=True)  # A stale, torn attempt.
    os.makedirs(staging_root)
    # The parent's save writes `<staging_root>/<name>`, never `final_path`.
    staging = tff.program.FileProgramStateManager(staging_root, prefix=self._prefix)
    await staging.save(program_state, version)
    os.replace(os.path.join(staging_root, name), final_path)
    shutil.rmtree(staging_root)
    await self._remove_old_program_state()

  def set_aside(self, version: int) -> str:
    """Renames an unreadable version out of the manager's sight; returns the path."""
    path = self._get_path_for_version(version)
    root, name = os.path.split(path)
    aside = os.path.join(root, UNREADABLE_PREFIX + name)
    suffix = 1
    while os.path.exists(aside):
      suffix += 1
      aside = os.path.join(root, f"{UNREADABLE_PREFIX}{name}.{suffix}")
    os.replace(path, aside)
    return aside


def load_latest_readable(manager: AtomicFileProgramStateManager, structure: Any
                         ) -> Tuple[Optional[Any], int]:
  """(state, version) of the newest readable version, or (None, 0) if none.

  Unreadable versions are set aside with a warning naming them.
  """
  versions = sorted(asyncio.run(manager.get_versions()) or [], reverse=True)
  for version in versions:
    try:
      return asyncio.run(manager.load(version, structure)), version
    except Exception as e:  # pylint: disable=broad-except
      aside = manager.set_aside(version)
      logging.warning("Checkpoint of round %d is unreadable (%s: %s); set aside as "
                      "%s, resuming from an older one.", version, type(e).__name__,
                      str(e).splitlines()[0] if str(e) else "", aside)
  return None, 0
