"""Extension by import path: load an object a user defined in a Python file."""

from __future__ import annotations

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
