"""Progress lines: the run's name, where it is, and the time left at its pace."""

import io

from fed_retrieval.training import progress


def test_durations_read_as_seconds_minutes_or_hours():
  assert [progress.duration(s) for s in (0.4, 59, 60, 185, 3600, 3723)] == [
      "0 s", "59 s", "1:00", "3:05", "1:00:00", "1:02:03"]


def test_time_left_is_the_pace_of_this_process_times_the_rounds_to_go():
  now = [100.0]
  stream = io.StringIO()
  lines = progress.ProgressLines("federated global_softmax", "round", 300, done=40,
                                 may_stop_early=True, clock=lambda: now[0],
                                 stream=stream)
  lines.say("resuming from round 40 in runs/x")
  now[0] = 110.0  # 2 rounds in 10 s: 5 s a round, 258 rounds to go.
  line = lines.report(42, "loss 6.5000, val global_recall@10 0.0512")
  assert line == ("federated global_softmax: round 42/300, loss 6.5000, val "
                  "global_recall@10 0.0512; 10 s elapsed, at most 21:30 left")
  assert stream.getvalue().splitlines() == [
      "federated global_softmax: resuming from round 40 in runs/x", line]
  assert progress.last_position() == "federated global_softmax: round 42/300"


def test_a_fixed_budget_says_its_time_left_plainly_and_none_before_a_round():
  now = [0.0]
  lines = progress.ProgressLines("centralized hinge_spreadout", "step", 1000,
                                 clock=lambda: now[0], stream=io.StringIO())
  assert lines.time_left(0, 5.0) is None
  now[0] = 30.0
  assert lines.report(250).endswith("step 250/1000; 30 s elapsed, 1:30 left")
