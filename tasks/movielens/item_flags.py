"""absl flags of the items' display names (`scripts.recommend`)."""

from absl import flags

from tasks.movielens import item_names

ITEM_ID_COLUMN = flags.DEFINE_string("item_id_column", "item_id",
                                     "--items_path of one's own: the item id's column.")
ITEMS_PATH = flags.DEFINE_string(
    "items_path", None,
    "Items' display names: a MovieLens release's titles (u.item, movies.dat, "
    "movies.csv, or its directory), or a CSV/TSV/Parquet file with "
    "--item_id_column and --item_name_column.")
ITEM_NAME_COLUMN = flags.DEFINE_string(
    "item_name_column", None, "--items_path of one's own: the display name's column.")


def item_names_from_flags() -> dict:
  """Item id -> display name from --items_path ({} without it)."""
  if ITEMS_PATH.value is None:
    return {}
  return item_names.read_item_names(
      ITEMS_PATH.value, ITEM_ID_COLUMN.value if ITEM_NAME_COLUMN.value else None,
      ITEM_NAME_COLUMN.value)
