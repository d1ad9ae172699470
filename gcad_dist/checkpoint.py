"""Model checkpoints: one directory, ``model.pt`` holds the model config and weights.

Every entry point (train, pretrain, finetune, score) writes and reads this format, so a
pre-training checkpoint can be fine-tuned or scored directly. Training state (optimizer,
scheduler, memory buffers, epoch, step, RNG) lives beside it in ``train_state.pt``.

Both files hold only tensors and plain data (dicts, lists, tuples, str, numbers, None) and are read
with ``torch.load(weights_only=True)``: a file that asks the unpickler for anything else (a class, a
function: what a malicious pickle needs to run code) is refused with :class:`CheckpointError` before
anything in it is built. RNG states are stored as tensors for that reason (NumPy's key array as an
int64 tensor); ``train_state.pt`` files written before that held a NumPy array, which is still read
by allow-listing only NumPy's array reconstruction.
"""

from __future__ import annotations

import os
import pickle
import re
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from partitioning.errors import GraphInputError
from partitioning.features import mark_normalization

MODEL_FILE = "model.pt"
TRAIN_STATE_FILE = "train_state.pt"
SNAPSHOTS_KEY = "snapshot_state_dicts"  # model.pt: a snapshot ensemble's states, the best first (optional)
# model.pt: a candidate ensemble's members, the primary first (optional): [{config, states, mean, std[, block][,
# views]}]; a member's "block" indexes extra["input_blocks"] (INPUT_BLOCKS_KEY), the feature normalisation it reads
# (absent: 0); "views" = {block, feature_view, signature_view}: the label-free views it applies to its score, reading
# the raw features of that block (gcad_dist.model.candidate_ensemble; absent: none)
CANDIDATES_KEY = "candidate_members"
# a candidate member's "kind" when it is gcad_dist.finetune's label-free isolation forest (gcad_dist.model.
# isolation_forest; its trees' state under "forest", no config); absent: a GCCAD model
ISOLATION_FOREST_KIND = "isolation-forest"
# a candidate member's "kind" when it is gcad_dist.finetune's exemplar scorer (gcad_dist.model.exemplar; its buffers
# under "exemplar", no config)
EXEMPLAR_KIND = "exemplar"
# the key under which a member of each kind without a GCCAD config keeps its state
MEMBER_STATE_KEYS = {ISOLATION_FOREST_KIND: "forest", EXEMPLAR_KIND: "exemplar"}
# model.pt's extra (optional): the feature normalisations the members read, one input block each, the checkpoint's
# own ("normalize") first (gcad_dist.finetune's model trained from scratch on gcad_dist.train's z-scores)
INPUT_BLOCKS_KEY = "input_blocks"
# model.pt: gcad_dist.train's forest view (optional): {"forest": the forest's state, "cdfs": [{values, cdf}] for the
# model and the forest, "weights": [model's, forest's] (since session 62; absent: equal)}; readers score with the
# weighted mean of both scores' empirical CDFs (gcad_dist.model.rank_blend)
FOREST_KEY = "forest_view"


class CheckpointError(GraphInputError):
    """A checkpoint file that is not ours (refused unread), unreadable, or from another model config."""


def safe_load(path: Path, extra_globals: list | None = None) -> Any:
    """``torch.load(weights_only=True)``, errors as one-line :class:`CheckpointError`."""
    try:
        with open(path, "rb") as f:
            head = f.read(2)
    except OSError as e:
        raise CheckpointError(str(path), f"cannot read checkpoint ({e.strerror})") from None
    # torch.save writes a zip archive (PK); the legacy format starts with a pickle protocol byte (0x80)
    if not (head == b"PK" or head[:1] == b"\x80"):
        raise CheckpointError(str(path), "not a PyTorch checkpoint file (neither a torch.save zip archive nor a "
                                         "pickle)")
    try:
        if extra_globals:
            with torch.serialization.safe_globals(extra_globals):
                return torch.load(path, map_location="cpu", weights_only=True)
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        text = str(e)
        found = re.search(r"GLOBAL (\S+)", text)
        if found:
            what = f"it asks for the Python object {found.group(1)}"
        else:
            detail = text.split("WeightsUnpickler error:", 1)[-1] if "WeightsUnpickler error:" in text else ""
            lines = [ln.strip() for ln in detail.splitlines() if ln.strip()]
            what = "it holds more than tensors and plain data" + (f" ({lines[0][:120]})" if lines else "")
        raise CheckpointError(str(path), f"refusing to unpickle: {what}; not a gcad-dist checkpoint "
                              "(only tensors and plain data are loaded, nothing in the file was run)") from None
    except Exception as e:  # noqa: BLE001 - truncated zip, not a torch file, ...
        first = (str(e).strip().splitlines() or [""])[0]
        first = first if len(first) <= 200 else first[:197].rstrip() + "..."
        raise CheckpointError(str(path), f"cannot read checkpoint ({type(e).__name__}: {first})") from None


def atomic_save(obj: Any, path: Path) -> None:
    """``torch.save`` to a temporary file beside ``path``, then renamed over it: a reader (or a crash) never sees a
    half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_model(directory: str | Path, model: torch.nn.Module, config: Any, extra: dict | None = None,
               snapshots: list[dict[str, torch.Tensor]] | None = None) -> Path:
    """Write ``model.pt`` = {config (dataclass as dict), state_dict, extra[, snapshot_state_dicts]} atomically;
    returns its path. ``snapshots``: the states of a snapshot ensemble (:mod:`gcad_dist.model.snapshots`),
    the best first; with two or more, readers score with their mean (``state_dict`` stays the best one).
    A :class:`~gcad_dist.model.candidate_ensemble.CandidateEnsemble` is written as its primary member (config,
    ``state_dict`` and snapshots as above, what older readers load) plus every member under ``candidate_members``:
    its config, states (the best first), score standardisation, input ``block`` and, for a member that carries its
    label-free views (``gcad_dist.finetune``'s zero-shot candidate), ``views``. A
    :class:`~gcad_dist.model.rank_blend.RankBlend` of a model and a forest (``gcad_dist.train``'s forest view) is
    written as that model plus the forest's state, both empirical CDFs and the weights under ``forest_view``."""
    from gcad_dist.model.candidate_ensemble import CandidateEnsemble
    from gcad_dist.model.rank_blend import RankBlend
    from gcad_dist.model.snapshots import base_model, member_states, primary_member

    directory = Path(directory)
    members = None
    forest = None
    if isinstance(model, RankBlend):
        if len(model.members) != 2:
            raise ValueError(f"a rank blend of a model and a forest is saved, got {len(model.members)} members")
        forest = {"forest": _module_state(model.members[1]),
                  "cdfs": [{"values": c.values.cpu(), "cdf": c.cdf.cpu()} for c in model.cdfs],
                  "weights": model.weights.cpu().tolist()}
        model = model.members[0]
    if isinstance(model, CandidateEnsemble):  # the primary stays the top-level model; every member is kept too
        blocks = model.blocks or [0] * len(model.members)
        views = model.views or [None] * len(model.members)
        members = [{**_member_record(m), "mean": float(mu), "std": float(sd),
                    **({"block": int(b)} if model.blocks is not None else {}),
                    **({"views": dict(v)} if v is not None else {})}
                   for m, mu, sd, b, v in zip(model.members, model.means.tolist(), model.stds.tolist(), blocks, views)]
        read = [*(model.blocks or []), *(v["block"] for v in views if v is not None)]
        if read and len((extra or {}).get(INPUT_BLOCKS_KEY) or []) <= max(read):
            raise ValueError(f"members read input blocks {sorted(set(read))}: extra[{INPUT_BLOCKS_KEY!r}] "
                             "must name the normalisation of each")
        # the primary: the first GCCAD member (an isolation forest kept alone leaves the top-level state empty: the
        # members say what scores, and ``config`` gives the input width)
        primary = primary_member(model.members)
        snapshots = member_states(primary) if primary is not None else None
        model = base_model(primary) if primary is not None else None
    cfg = asdict(config) if hasattr(config, "__dataclass_fields__") else dict(config)
    state = cpu_state(model.state_dict()) if model is not None else {}
    # extra["normalize"] == "power" is marked as today's power (partitioning.features.recorded_normalization)
    obj: dict[str, Any] = {"config": cfg, "state_dict": state, "extra": mark_normalization(extra or {})}
    if members:
        obj[CANDIDATES_KEY] = members
    if forest:
        obj[FOREST_KEY] = forest
    if snapshots and len(snapshots) > 1:
        obj[SNAPSHOTS_KEY] = [cpu_state(st) for st in snapshots]
    path = directory / MODEL_FILE
    atomic_save(obj, path)
    return path


def _member_record(member: torch.nn.Module) -> dict[str, Any]:
    """A candidate ensemble member as ``model.pt`` keeps it: a GCCAD model's config and states (the best first), or a
    scorer without one (its ``member_kind``: an isolation forest's trees, :data:`ISOLATION_FOREST_KIND`, or an
    exemplar scorer's exemplars, :data:`EXEMPLAR_KIND`), its state under :data:`MEMBER_STATE_KEYS`' key."""
    from gcad_dist.model.snapshots import base_model, member_states

    kind = getattr(member, "member_kind", None)
    if kind is not None:
        return {"kind": kind, MEMBER_STATE_KEYS[kind]: _module_state(member)}
    return {"config": asdict(base_model(member).config), "states": [cpu_state(st) for st in member_states(member)]}


def _module_state(module: torch.nn.Module) -> dict[str, Any]:
    """A forest's ``state_dict()`` as the checkpoint keeps it: its buffers on the CPU, its extra state (plain ints)
    as it is."""
    return {k: v.detach().cpu() if torch.is_tensor(v) else v for k, v in module.state_dict().items()}


def cpu_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict's tensors detached and on the CPU (what the checkpoint files hold)."""
    return {k: v.detach().cpu() for k, v in state.items()}


def load_model_file(directory: str | Path) -> dict:
    """Read ``model.pt`` from a checkpoint directory (or the file itself)."""
    p = Path(directory)
    if p.is_dir():
        p = p / MODEL_FILE
    if not Path(directory).exists():
        raise FileNotFoundError(f"{directory}: no such checkpoint folder or file")
    if not p.exists():
        raise FileNotFoundError(f"{directory}: no {MODEL_FILE} here (not a gcad-dist checkpoint)")
    return safe_load(p)


def rng_state() -> dict:
    """The state of every random generator a training step draws from (torch CPU/CUDA, NumPy, random)."""
    import random

    import numpy as np

    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    numpy_state = {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                   "has_gauss": int(has_gauss), "gauss": float(gauss)}  # tensors + plain data: weights_only
    state = {"torch": torch.get_rng_state(), "numpy": numpy_state, "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore generators saved by :func:`rng_state`."""
    import random

    import numpy as np

    torch.set_rng_state(state["torch"])
    ns = state["numpy"]
    if isinstance(ns, dict):
        ns = (ns["kind"], ns["keys"].numpy().astype(np.uint32), ns["pos"], ns["has_gauss"], ns["gauss"])
    np.random.set_state(ns)  # a tuple with a NumPy array in train_state.pt files written before
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_train_state(directory: str | Path, state: dict[str, Any]) -> Path:
    """Write ``train_state.pt`` beside ``model.pt``: optimizer, scheduler, memory buffers, epoch, step,
    RNG states, metric history (any picklable dict). Written atomically."""
    path = Path(directory) / TRAIN_STATE_FILE
    atomic_save(state, path)
    return path


def _legacy_numpy_globals() -> list:
    """What a NumPy array in a pickle refers to (train_state.pt files written before RNG states were
    tensors): the array reconstruction and dtype classes only, no other callable."""
    import numpy as np

    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # NumPy 1.x
        from numpy.core.multiarray import _reconstruct
    out = [_reconstruct, np.ndarray, np.dtype]
    out += [type(np.dtype(t)) for t in ("uint32", "int64", "float64")]
    return out


def load_train_state(directory: str | Path) -> dict[str, Any] | None:
    """Read ``train_state.pt`` from a checkpoint directory; ``None`` when there is none (a model-only
    checkpoint). Read with ``weights_only=True`` (plus NumPy arrays, for files written before RNG states
    were tensors): a file holding anything else is refused with :class:`CheckpointError`."""
    path = Path(directory) / TRAIN_STATE_FILE
    if not path.exists():
        return None
    return safe_load(path, _legacy_numpy_globals())


# GCCADConfig field -> the pretrain option that sets it (for --resume errors)
RESUME_OPTIONS = {"in_dim": "feature width of --store", "hidden": "--hidden", "num_layers": "--layers",
                  "conv": "--conv", "readout": "--readout", "dropout": "--dropout", "tau": "--tau",
                  "context_hops": "--context-hops", "loose_context": "--loose-context",
                  "ball_switch": "--ball-switch"}


def checkpoint_dirs(run_dir: str | Path) -> list[Path]:
    """Ray Train checkpoint folders (``checkpoint_<time>``) of a run folder, oldest first."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    return sorted(p for p in run_dir.iterdir() if p.is_dir() and p.name.startswith("checkpoint_"))


def check_resume(run_dir: str | Path, model_config: dict[str, Any]) -> int:
    """Before ``--resume``: every checkpoint of ``run_dir`` must be ours and hold ``model_config``.

    Reads each ``model.pt`` and ``train_state.pt`` with ``weights_only=True`` (:class:`CheckpointError`
    for a file that is not ours) and compares the stored model config with the one this run would build,
    raising :class:`CheckpointError` that names every differing setting (``--hidden 16`` in the
    checkpoint, ``--hidden 32`` asked). Returns the number of checkpoints checked.
    """
    dirs = checkpoint_dirs(run_dir)
    for d in dirs:
        if not (d / MODEL_FILE).exists():
            continue  # a checkpoint Ray did not finish writing; Ray itself skips it
        ck = load_model_file(d)
        if not isinstance(ck, dict) or not isinstance(ck.get("config"), dict):
            raise CheckpointError(str(d / MODEL_FILE), "not a gcad-dist checkpoint (no model config)")
        stored = ck["config"]
        diff = [k for k, v in model_config.items() if k in stored and stored[k] != v]
        if diff:
            def show(k: str, v: Any) -> str:
                opt = RESUME_OPTIONS.get(k, k)
                return f"{opt} = {v}" if opt.startswith("feature") else f"{opt} {v}"

            was = ", ".join(show(k, stored[k]) for k in diff)
            now = ", ".join(show(k, model_config[k]) for k in diff)
            raise CheckpointError("--resume", f"checkpoint {d} was trained with {was}, this run asks for {now}; "
                                  "resume with the same settings, or start over with --overwrite")
        load_train_state(d)
    return len(dirs)
