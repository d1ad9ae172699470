"""PyG's generated ``propagate`` sources, removed when the process exits.

PyTorch Geometric (2.5 and later) renders each ``MessagePassing`` class's ``propagate`` (and ``edge_updater``) from
a Jinja template into a new file in the temporary folder the first time the class is instantiated in a process, and
never deletes it (``torch_geometric.template.module_from_template``, ``delete=False``). Every training process,
Ray worker and candidate task therefore left a few files named ``*_propagate_<random>.py`` in ``/tmp``: hundreds
on a machine after a day of runs. Removing them at exit was not enough: a process that is killed (a Ray worker at
``ray.shutdown``, a run stopped by its time limit) runs no exit hook, and 628 such files gathered here in one day.

So :func:`release_generated_sources`, called as soon as a conv is built (:func:`gcad_dist.model.node_update.make_conv`
and the baselines' layers), keeps each generated module's source in :mod:`linecache` (which tracebacks and
``inspect.getsource`` read) and deletes its file at once. The exit hook stays, for modules built elsewhere.
Only this process's own files are touched: those of the generated modules it has loaded.
"""

from __future__ import annotations

import atexit
import linecache
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


def release_generated_sources() -> None:
    """Delete :func:`generated_source_files` now, their text kept in :mod:`linecache` (an entry without a modification
    time, which ``linecache.checkcache`` leaves alone), so that tracebacks and ``inspect`` still show the source."""
    for path in generated_source_files():
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError:
            continue  # already gone
        linecache.cache[path] = (len(text), None, text.splitlines(keepends=True), path)
        try:
            os.unlink(path)
        except OSError:
            pass


atexit.register(remove_generated_sources)
