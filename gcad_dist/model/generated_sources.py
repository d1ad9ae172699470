"""PyG's generated ``propagate`` sources, removed when the process exits.

PyTorch Geometric (2.5 and later) renders each ``MessagePassing`` class's ``propagate`` (and ``edge_updater``) from
a Jinja template into a new file in the temporary folder the first time the class is instantiated in a process, and
never deletes it (``torch_geometric.template.module_from_template``, ``delete=False``). Every training process,
Ray worker and candidate task therefore left a few files named ``*_propagate_<random>.py`` in ``/tmp``: hundreds
on a machine after a day of runs. The module needs the file while the process lives (tracebacks and
``inspect`` read it), so this removes the process's own files at exit, and nothing else.
"""

from __future__ import annotations

import atexit
import os
import sys
import tempfile

_SUFFIXES = ("_propagate", "_edge_updater")


def generated_source_files() -> list[str]:
    """The files of the generated modules this process has loaded: modules named ``*_propagate`` /
    ``*_edge_updater`` whose file lies in the temporary folder and is named after the module."""
    tmp = os.path.realpath(tempfile.gettempdir())
    out = []
    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        if not path or not name.endswith(_SUFFIXES):
            continue
        if os.path.dirname(os.path.realpath(path)) == tmp and os.path.basename(path).startswith(name + "_"):
            out.append(path)
    return out


def remove_generated_sources() -> None:
    """Delete :func:`generated_source_files` (registered to run at exit)."""
    for path in generated_source_files():
        try:
            os.unlink(path)
        except OSError:
            pass


atexit.register(remove_generated_sources)
