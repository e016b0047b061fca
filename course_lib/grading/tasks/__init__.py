"""One module (or, for a set with many tasks, a package with a module per task) per exercise
set: ex00, ex01, ...; importing this package registers them all."""

import importlib
import pkgutil

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if _info.name.startswith("ex"):
        importlib.import_module(f"{__name__}.{_info.name}")
