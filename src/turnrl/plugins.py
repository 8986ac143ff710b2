"""Extension by import path: load an object a user defined in a Python file."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any


def load_attribute(path: str | Path, name: str, where: str, error: type[Exception] = ValueError) -> Any:
    """`name` from the Python file at `path`; errors are one line starting with `where`.

    The module is imported once per resolved path and cached in `sys.modules`, so a file
    named by several config keys is executed only once.
    """
    file = Path(path)
    if not file.is_file():
        raise error(f"{where}: file not found: {file}")
    module_name = f"turnrl_user_{abs(hash(str(file.resolve())))}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, file)
        if spec is None or spec.loader is None:
            raise error(f"{where}: cannot import {file}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as err:
            del sys.modules[module_name]
            raise error(f"{where}: importing {file} failed: {err!r}") from None
    obj = getattr(module, name, None)
    if obj is None:
        raise error(f"{where}: {file} defines no '{name}'")
    return obj


def load_object(target: str, name: str, where: str, error: type[Exception] = ValueError) -> Any:
    """`name` from `target`: a Python file (a path) or an importable module; errors are one line
    starting with `where` (a missing file or module, one that does not import, a name it lacks)."""
    if target.endswith(".py") or "/" in target or Path(target).is_file():
        return load_attribute(target, name, where, error)
    try:
        module = importlib.import_module(target)
    except ImportError as err:
        raise error(f"{where}: cannot import module {target!r} ({' '.join(str(err).split())})") from None
    except Exception as err:
        raise error(f"{where}: importing {target} failed: {' '.join(repr(err).split())}") from None
    if not hasattr(module, name):
        raise error(f"{where}: module {target} defines no {name!r}")
    return getattr(module, name)


def load_function(ref: str, where: str, error: type[Exception] = ValueError) -> Any:
    """The callable at `path/to/file.py:name` or `package.module:name`; errors are one line starting
    with `where` (a malformed reference, a missing file or module, one that does not import, a name
    it lacks, an object that is not callable)."""
    target, sep, name = ref.strip().rpartition(":")
    if not sep or not target or not name.isidentifier():
        raise error(f"{where}: {ref!r} must be path/to/file.py:function or package.module:function")
    fn = load_object(target, name, where, error)
    if not callable(fn):
        raise error(f"{where}: {name!r} in {target} is not a function ({type(fn).__name__})")
    return fn
