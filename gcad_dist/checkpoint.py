"""Model checkpoints: one directory, ``model.pt`` holds the model config and weights.

Every entry point (train, pretrain, finetune, score) writes and reads this format, so a
pre-training checkpoint can be fine-tuned or scored directly. Training state (optimizer,
scheduler, memory buffers, epoch, step, RNG) lives beside it in ``train_state.pt``.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

MODEL_FILE = "model.pt"
TRAIN_STATE_FILE = "train_state.pt"


def _atomic_save(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_model(directory: str | Path, model: torch.nn.Module, config: Any, extra: dict | None = None) -> Path:
    """Write ``model.pt`` = {config (dataclass as dict), state_dict, extra} atomically; returns its path."""
    directory = Path(directory)
    cfg = asdict(config) if hasattr(config, "__dataclass_fields__") else dict(config)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    path = directory / MODEL_FILE
    _atomic_save({"config": cfg, "state_dict": state, "extra": extra or {}}, path)
    return path


def load_model_file(directory: str | Path) -> dict:
    """Read ``model.pt`` from a checkpoint directory (or the file itself)."""
    p = Path(directory)
    if p.is_dir():
        p = p / MODEL_FILE
    if not p.exists():
        raise FileNotFoundError(f"{directory}: no {MODEL_FILE} here (not a gcad-dist checkpoint)")
    return torch.load(p, map_location="cpu", weights_only=True)


def rng_state() -> dict:
    """The state of every random generator a training step draws from (torch CPU/CUDA, NumPy, random)."""
    import random

    import numpy as np

    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore generators saved by :func:`rng_state`."""
    import random

    import numpy as np

    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_train_state(directory: str | Path, state: dict[str, Any]) -> Path:
    """Write ``train_state.pt`` beside ``model.pt``: optimizer, scheduler, memory buffers, epoch, step,
    RNG states, metric history (any picklable dict). Written atomically."""
    path = Path(directory) / TRAIN_STATE_FILE
    _atomic_save(state, path)
    return path


def load_train_state(directory: str | Path) -> dict[str, Any] | None:
    """Read ``train_state.pt`` from a checkpoint directory; ``None`` when there is none (a model-only
    checkpoint). Holds NumPy/Python RNG states, so it is unpickled in full: load only checkpoints you wrote."""
    path = Path(directory) / TRAIN_STATE_FILE
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)
