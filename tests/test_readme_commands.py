"""Every command README.md and the Makefile show runs as written: each flag is
one its script defines, with a value its parser takes (checked, not run)."""

import os

import pytest

from tests import readme_commands
from tests.script_runs import ROOT


def _read(name: str) -> str:
  with open(os.path.join(ROOT, name)) as f:
    return f.read()


_COMMANDS = (readme_commands.commands_in_markdown(_read("README.md")) +
             readme_commands.commands_in_makefile(_read("Makefile")))


def test_commands_are_found_in_code_blocks_and_inline_code():
  text = "\n".join([
      "Run `python -m scripts.compare --task=xc",
      "--rounds=5 [flags] --output_dir=<dir>` first.",
      "```sh",
      "# Comment.",
      ".venv/bin/python -m scripts.train_federated --loss=global_softmax \\",
      "    [--include_shuffled] --output_dir=runs/x   # = make demo",
      "```",
  ])
  commands = readme_commands.commands_in_markdown(text)
  assert [(c.script, c.args, c.where) for c in commands] == [
      ("train_federated", ["--loss=global_softmax", "--include_shuffled",
                           "--output_dir=runs/x"], "README.md:5"),
      ("compare", ["--task=xc", "--rounds=5", "--output_dir=<dir>"], "README.md:1"),
  ]
  assert readme_commands.make_targets_named(text) == ["demo"]


def test_makefile_variables_are_expanded_to_their_defaults():
  text = "\n".join([
      "SET ?= bibtex",
      "FILES = --xc_train_path=$(SET).txt",
      "PARTITION ?= k_labels_per_client",
      "compare:",
      "\t$(PY) -m scripts.compare $(FILES) --partition=$(PARTITION) \\",
      "\t    --output_dir=runs/$(PARTITION)",
  ])
  [command] = readme_commands.commands_in_makefile(text)
  assert command.args == ["--xc_train_path=bibtex.txt", "--partition=k_labels_per_client",
                          "--output_dir=runs/k_labels_per_client"]


def test_the_readme_shows_every_script():
  shown = {command.script for command in _COMMANDS}
  scripts = {name[:-3] for name in os.listdir(os.path.join(ROOT, "scripts"))
             if name.endswith(".py") and name not in ("__init__.py", "cli.py", "console.py")}
  assert scripts <= shown, f"scripts without an example: {sorted(scripts - shown)}"


@pytest.mark.parametrize("script", sorted({c.script for c in _COMMANDS}))
def test_every_shown_flag_is_one_the_script_parses(script):
  commands = [command for command in _COMMANDS if command.script == script]
  assert readme_commands.flag_problems(commands) == []


def test_a_renamed_or_misspelt_flag_is_reported_with_its_line():
  text = "```\npython -m scripts.train_centralized --synthetic=ml1m \\\n" \
         "  --eval_every_step=10000 --loss=hinged --centralized_max_epochs=two " \
         "--noshuffle_across_users\n```"
  problems = readme_commands.flag_problems(readme_commands.commands_in_markdown(text))
  assert [problem.split(": ")[:2] for problem in problems] == [
      ["README.md:2", "unknown flag --eval_every_step"],
      ["README.md:2", "--loss=hinged"],
      ["README.md:2", "--centralized_max_epochs=two"],
  ]


def test_every_make_target_the_readme_names_exists():
  targets = set(readme_commands.make_targets(_read("Makefile")))
  named = set(readme_commands.make_targets_named(_read("README.md")))
  assert named <= targets, f"README names missing targets: {sorted(named - targets)}"


def test_stated_defaults_are_found_in_their_three_forms():
  text = ("Labels by `--xc_label_assignment`:\n`all` (the default) makes one example...\n\n"
          "The margin `--hinge_margin` (default `0.5`), and `--patience=5` (the default);\n"
          "`--seed` defaults nowhere here.\n\n```\n--patience (default 9)\n```\n")
  assert sorted((s.flag, s.value, s.where)
                for s in readme_commands.stated_defaults(text)) == [
      ("hinge_margin", "0.5", "README.md:4"), ("patience", "5", "README.md:4"),
      ("xc_label_assignment", "all", "README.md:2")]


def test_a_stated_default_that_is_not_the_flags_is_reported():
  # The sentence README.md once had: the code's default is `sample`.
  text = "dealt to clients by their label (`--xc_label_assignment`):\n`all` (the default)."
  assert readme_commands.default_problems(readme_commands.stated_defaults(text)) == [
      "README.md:2: --xc_label_assignment stated default 'all', the flag's is 'sample'"]


def test_every_default_the_readme_and_docs_state_is_the_flags():
  stated = readme_commands.stated_defaults(_read("README.md"))
  docs = os.path.join(ROOT, "docs")
  for root, _, names in os.walk(docs):
    for name in sorted(n for n in names if n.endswith(".md")):
      path = os.path.join(root, name)
      stated += readme_commands.stated_defaults(_read(path), os.path.relpath(path, ROOT))
  assert readme_commands.default_problems(stated) == []
