"""gcad-dist: distributed GCCAD / GCCAD-pre for graph anomaly detection."""

__version__ = "0.1.0"
