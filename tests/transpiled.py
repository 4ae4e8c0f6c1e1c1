"""Autograph's transpiled functions, named in one process and made in another.

Autograph rewrites each Python function a `tf.function` traces into graph
code once per process and caches it by the function's code object and its
conversion options: ~2.5 s of a small script run (TFF's metric finalizers and
optimizers, Keras saving, our towers). `tests.script_server` forks each script
child from one server, so a child that names what it transpiled (`keys`) lets
the server transpile the same (`transpile`) before it forks the next, which
then finds them cached. Transpiling is a rewrite of source text: it runs no
TensorFlow op, so the server stays as fit to fork as before. The cache entry
is the one a trace would make: autograph keys it on the code object alone,
whatever the function's closure, so a function made here from the module's
code object (empty cells for its closure) yields the code the trace would get.
"""

import sys
import types
from typing import Dict, Iterable, List, Tuple

from tensorflow.python.autograph.core import converter
from tensorflow.python.autograph.impl import api

Key = Tuple[str, int, str, bool, bool, bool, str]


def keys() -> List[Key]:
  """What this process has transpiled: (file, first line, name) of each code
  object and the options it was converted with (its features comma-separated)."""
  cache = api._TRANSPILER._cache._cache  # pylint: disable=protected-access
  return [(code.co_filename, code.co_firstlineno, code.co_name, options.recursive,
           options.user_requested, options.internal_convert_user_code,
           ",".join(sorted(feature.name for feature in options.optional_features)))
          for code, by_options in list(cache.items()) for options in by_options]


def _code_objects(module: types.ModuleType) -> Dict[Tuple[int, str], List[types.CodeType]]:
  """The module's code objects by (first line, name): its functions', its
  classes' methods' and those nested in them."""
  found: Dict[Tuple[int, str], List[types.CodeType]] = {}

  def add(code: types.CodeType) -> None:
    found.setdefault((code.co_firstlineno, code.co_name), []).append(code)
    for constant in code.co_consts:
      if isinstance(constant, types.CodeType):
        add(constant)

  def visit(value, in_class: bool = False) -> None:
    if isinstance(value, (staticmethod, classmethod)):
      value = value.__func__
    if isinstance(value, property):
      for accessor in (value.fget, value.fset, value.fdel):
        visit(accessor, in_class)
      return
    value = getattr(value, "python_function", value)  # A tf.function's Python function.
    value = getattr(value, "__wrapped__", value)
    code = getattr(value, "__code__", None)
    if isinstance(code, types.CodeType) and code.co_filename == module.__file__:
      add(code)
    elif isinstance(value, type) and not in_class and value.__module__ == module.__name__:
      for member in vars(value).values():
        visit(member, in_class=True)

  for value in list(vars(module).values()):
    visit(value)
  return found


def transpile(wanted: Iterable[Key]) -> int:
  """Transpiles each key's function as a trace would, where its module is
  loaded; returns how many it transpiled (one that fails is left to the trace)."""
  wanted = list(wanted)
  files = {key[0] for key in wanted}
  modules = {module.__dict__.get("__file__"): module for module in list(sys.modules.values())
             if isinstance(module, types.ModuleType) and module.__dict__.get("__file__") in files}
  code_objects = {path: _code_objects(module) for path, module in modules.items()}
  done = 0
  for path, line, name, recursive, user_requested, convert_user_code, features in wanted:
    options = converter.ConversionOptions(
        recursive=recursive, user_requested=user_requested,
        internal_convert_user_code=convert_user_code,
        optional_features=tuple(converter.Feature[feature]
                                for feature in features.split(",") if feature))
    for code in code_objects.get(path, {}).get((line, name), ()):
      function = types.FunctionType(code, vars(modules[path]), name, None,
                                    tuple(types.CellType() for _ in code.co_freevars))
      try:
        api._TRANSPILER.transform(function, converter.ProgramContext(options))  # pylint: disable=protected-access
        done += 1
      except Exception:  # pylint: disable=broad-except  (the trace transpiles it, as without us)
        pass
  return done
