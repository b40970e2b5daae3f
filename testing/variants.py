"""Several versions of one kernel file in one process, for the same-run A/B probes under
testing/device_runs/ (they time a branch's kernels against main's in the same run)."""
import importlib.util
import sys
from types import ModuleType


def load_variant(name: str, path: str) -> ModuleType:
    """The Python file at `path` imported as a new module `name` (registered in sys.modules, as an
    import would, for inspect and dataclasses): its own module globals and its own `tilelang.jit`
    caches, so a copy whose constants are changed after loading compiles its own kernels. `name`
    must be new to the process."""
    if name in sys.modules:
        raise ValueError(f"load_variant: a module {name!r} is already loaded")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
