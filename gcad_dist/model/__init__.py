"""GCCAD model: ``from gcad_dist.model import GCCAD, GCCADConfig, GCCADOutput``."""

from .context import ContextSync
from .gccad import GCCAD, GCCADConfig, GCCADOutput

__all__ = ["GCCAD", "GCCADConfig", "GCCADOutput", "ContextSync"]
