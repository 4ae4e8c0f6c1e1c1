"""absl flags of the top-k index (`scripts.export`, `recommend`, `evaluate`)."""

from absl import flags

from fed_retrieval import top_k_index

INDEX = flags.DEFINE_enum(
    "index", top_k_index.AUTO, (top_k_index.AUTO,) + top_k_index.KINDS,
    "Top-k index: brute_force (every item scored) or approximate (faiss IVF, its "
    "recall against brute force measured and stated). auto: export and XC "
    f"evaluation pick approximate from {top_k_index.APPROXIMATE_FROM:,} items or "
    "classes up; recommend and evaluate use the index the export holds.")
INDEX_RECALL = flags.DEFINE_float(
    "index_recall", top_k_index.TARGET_RECALL,
    "The approximate index's recall@k against brute force that its nprobe must "
    "reach on calibration queries (export, XC evaluation, benchmark_serving).")

HELP_GROUP = ("Top-k index", None, (INDEX,))  # cli.HelpGroup of its readers
