"""The flag of every benchmark that writes its figures as a results page."""

from absl import flags

PAGE = flags.DEFINE_string(
    "page", None, "Also write the figures as a markdown page here, under the command, "
    "commit, cores and date that made them (as docs/results/ holds).")

HELP_GROUP = ("Results page", None, (PAGE,))  # cli.HelpGroup
