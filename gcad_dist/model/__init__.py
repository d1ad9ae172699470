"""GCCAD model: ``from gcad_dist.model import GCCAD, GCCADConfig, GCCADOutput``."""

from . import generated_sources  # noqa: F401 - PyG's generated propagate files in /tmp, removed at exit
from .context import ContextSync
from .gccad import GCCAD, GCCADConfig, GCCADOutput

__all__ = ["GCCAD", "GCCADConfig", "GCCADOutput", "ContextSync"]
