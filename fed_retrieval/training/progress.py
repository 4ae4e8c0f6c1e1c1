"""Progress lines a person can follow: where a run is and how long it has left.

Every training loop (federated rounds, centralized evaluations) prints one line
to stderr per round or evaluation, naming the run, with its latest figures, the
time it has run and an estimate of the time left: the mean time of the rounds
trained in this process times the rounds to the cap. Early stopping can end a
run sooner, so with patience the estimate is "at most".
"""

import sys
import time
from typing import Callable, Optional

_last_position: Optional[str] = None  # '<name>: round 12/300' of the latest line.


def last_position() -> Optional[str]:
  """Where the latest progress line of this process said a run was."""
  return _last_position


def duration(seconds: float) -> str:
  """'42 s', '3:05' (min:s) or '1:02:03' (h:min:s)."""
  seconds = int(round(seconds))
  if seconds < 60:
    return f"{seconds} s"
  hours, rest = divmod(seconds, 3600)
  minutes, seconds = divmod(rest, 60)
  return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


class ProgressLines:
  """Prints '<name>: <unit> k/total, <figures>; <elapsed> elapsed, <left> left'.

  `done` is where the run starts (a resumed run's rounds do not count towards
  the speed); `may_stop_early` says the cap is an upper bound.
  """

  def __init__(self, name: str, unit: str, total: int, done: int = 0,
               may_stop_early: bool = False,
               clock: Callable[[], float] = time.monotonic, stream=None):
    self._name, self._unit, self._total = name, unit, total
    self._start_done, self._may_stop_early = done, may_stop_early
    self._clock = clock
    self._start = clock()
    self._stream = stream

  def say(self, message: str) -> str:
    """Prints '<name>: <message>' (a start, a resume, an end) in one write,
    so a thread ending the program (`tff_runtime.exit_with`) finds no line
    half-written."""
    line = f"{self._name}: {message}"
    stream = self._stream or sys.stderr
    stream.write(line + "\n")
    stream.flush()
    return line

  def report(self, done: int, figures: str = "") -> str:
    """Prints the line for `done` units of `total` and returns it."""
    elapsed = self._clock() - self._start
    global _last_position
    _last_position = f"{self._name}: {self._unit} {done}/{self._total}"
    line = f"{self._unit} {done}/{self._total}" + (f", {figures}" if figures else "")
    line += f"; {duration(elapsed)} elapsed"
    left = self.time_left(done, elapsed)
    if left is not None:
      line += f", {'at most ' if self._may_stop_early else ''}{duration(left)} left"
    return self.say(line)

  def time_left(self, done: int, elapsed: float) -> Optional[float]:
    """Seconds to the cap at this process's pace (None before the first unit)."""
    trained = done - self._start_done
    if trained <= 0:
      return None
    return elapsed / trained * max(0, self._total - done)
