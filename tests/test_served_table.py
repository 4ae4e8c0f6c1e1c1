"""A FedSS run whose class table is held by table servers (`served_table`,
`scripts.table_server`): the run here, to the last digit, and a server that
is lost mid-run named in one line, the run resuming identically."""

import pytest

from fed_retrieval.algorithms import served_table
from tests.server_runs import check_a_lost_server_resumes
from tests.server_runs import check_a_silent_server_is_one_line

QUICK_FEDSS = ["--task=xc", "--synthetic_xc=xc_tiny", "--algorithm=fedss",
               "--partition=k_labels_per_client", "--rounds=8", "--clients_per_round=20",
               "--eval_every=2", "--checkpoint_every=1", "--patience=0"]


def test_the_ranges_cover_the_table_in_order():
  assert served_table.range_bounds(10, 3).tolist() == [0, 3, 7, 10]
  assert served_table.range_bounds(2, 2).tolist() == [0, 1, 2]


@pytest.mark.runs_long
def test_a_run_on_table_servers_is_the_run_here_and_a_lost_server_resumes_identically(
    tmp_path):
  check_a_lost_server_resumes(tmp_path, QUICK_FEDSS, "scripts.table_server",
                              "table_servers", "table server")


def test_a_table_server_that_does_not_answer_is_one_line_and_exit_2(tmp_path):
  check_a_silent_server_is_one_line(tmp_path, QUICK_FEDSS, "table_servers",
                                    "table server")
