"""labmodel: build the lab's small serving model on a node, deterministically, with no model hub.

    python -m orchestrator.workloads.labmodel --name lab-tiny --dest /opt/orch/models/lab-tiny \
        --record /opt/orch/venv/orch-model.json
    python -m orchestrator.workloads.labmodel --hash /opt/orch/models/lab-tiny

Run by provisioning (playbooks/roles/workload_env) with the stack venv's Python, which has torch,
transformers and tokenizers (the cpu-serve stack). It prints one JSON line: name, path, the
sha256 over the model's files (tree_hash: sorted paths and contents), the files, and `changed`.

What the model is (docs/serving.md, "The lab model"): a Llama config (hidden 64, intermediate
128, 2 layers, 4 heads, 512 positions), random weights, and a word-level tokenizer trained here
with `tokenizers` on a generated corpus of 12 ASCII words, so that one generated token is one
streamed chunk. It measures the service path (HTTP, batching, scheduling, streaming), not model
quality: its output is random words.

Deterministic: the weights come from Python's `random.Random(seed)` (Mersenne Twister and IEEE
double arithmetic, the same bits on every machine), not from torch's CPU generator and its
vectorised transforms; each word of the corpus has its own count, so the trained vocabulary has
one order. With the stack's pinned transformers and tokenizers, two builds give the same files.

Idempotent: when the record names this model, this builder and this path, and the files there
still hash to the recorded sha256, nothing is built (`changed: false`, torch is not imported).
Otherwise the model is built into a fresh private folder beside `dest` (mkdtemp), hashed, and
renamed into place (the old folder, if any, is renamed away first and removed after); the record
is written last, atomically. No hub: HF_HUB_OFFLINE=1 is set before transformers is imported.

Exit status: 0; 1 when the build fails; 2 on bad arguments (a relative or non-normalised path, a
symbolic link where the model goes, an unknown model name).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import stat
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUILDER_VERSION = 1
"""Bumped whenever the recipe or the way the files are written changes (it is in the record)."""


@dataclass(frozen=True)
class Recipe:
    """One lab model: its Llama shape, its words and its seed."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    positions: int
    words: tuple[str, ...]
    seed: int = 0
    init_range: float = 0.02


# "hello" is the load generator's prompt word (loadgen.PROMPT_WORD): a prompt of N words is N
# input tokens.
RECIPES: dict[str, Recipe] = {
    "lab-tiny": Recipe(
        hidden=64,
        intermediate=128,
        layers=2,
        heads=4,
        positions=512,
        words=(
            "hello", "world", "alpha", "bravo", "charlie", "delta",
            "echo", "foxtrot", "golf", "hotel", "india", "juliet",
        ),
    ),
}  # fmt: skip
UNK, BOS, EOS = "<unk>", "<s>", "</s>"
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
HASH_PREFIX = "sha256:"
MAX_HASH_BYTES = 1 << 30


class LabModelError(Exception):
    """A refused argument or a build that cannot go on; the message says which."""


# --- hashing (fingerprint_probe.py repeats this with the standard library; a test holds them equal) ---


def tree_files(root: Path) -> list[str]:
    """The regular files under root as sorted relative POSIX paths.

    Raises LabModelError on a symbolic link or anything that is not a file or a folder.
    """
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            mode = os.lstat(full).st_mode
            if stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise LabModelError(f"{full}: not a regular file or folder")
            if stat.S_ISREG(mode):
                out.append(os.path.relpath(full, root).replace(os.sep, "/"))
    return sorted(out)


def tree_hash(root: Path) -> tuple[str, list[str]]:
    """sha256 over the files under root, and the files: for each file in sorted path order, its
    path (UTF-8), NUL, its size in decimal, NUL, its bytes. Names and sizes are in the hash, so
    moving bytes from one file to the next changes it."""
    h = hashlib.sha256()
    files = tree_files(root)
    for rel in files:
        data = (root / rel).read_bytes()
        h.update(rel.encode() + b"\0" + str(len(data)).encode() + b"\0")
        h.update(data)
    return HASH_PREFIX + h.hexdigest(), files


# --- the build --------------------------------------------------------------------------------------


def corpus(words: tuple[str, ...]) -> list[str]:
    """Lines to train the tokenizer on: word i appears len(words) - i times, so counts differ and
    the trainer's order (by count) is one order."""
    n = len(words)
    return [" ".join([w] * (n - i)) for i, w in enumerate(words)]


def build_tokenizer(recipe: Recipe) -> Any:
    """A word-level tokenizer trained on corpus(), wrapped for transformers."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(
        vocab_size=len(recipe.words) + 3, min_frequency=1, special_tokens=[UNK, BOS, EOS]
    )
    tok.train_from_iterator(corpus(recipe.words), trainer=trainer)
    vocab = tok.get_vocab()
    if set(vocab) != {UNK, BOS, EOS, *recipe.words}:
        raise LabModelError(f"the trained vocabulary is not the recipe's words: {sorted(vocab)}")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=EOS,
        chat_template=CHAT_TEMPLATE,
        model_max_length=recipe.positions,
    )


def fill_weights(model: Any, seed: int, init_range: float) -> None:
    """Every parameter from random.Random(seed), in name order: norms 1, the rest uniform in
    [-r, r] with r = init_range * sqrt(3) (the standard deviation of transformers' init)."""
    import torch

    rng = random.Random(seed)  # noqa: S311 (model weights, not a secret)
    bound = init_range * math.sqrt(3.0)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                p.fill_(1.0)
                continue
            values = [rng.uniform(-bound, bound) for _ in range(p.numel())]
            p.copy_(torch.tensor(values, dtype=torch.float64).reshape(p.shape).to(p.dtype))


def build_into(recipe: Recipe, folder: Path) -> None:
    """Write the model and its tokenizer into an empty folder."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer(recipe)
    config = LlamaConfig(
        vocab_size=len(tokenizer.get_vocab()),
        hidden_size=recipe.hidden,
        intermediate_size=recipe.intermediate,
        num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads,
        num_key_value_heads=recipe.heads,
        max_position_embeddings=recipe.positions,
        bos_token_id=tokenizer.convert_tokens_to_ids(BOS),
        eos_token_id=tokenizer.convert_tokens_to_ids(EOS),
        pad_token_id=tokenizer.convert_tokens_to_ids(EOS),
        tie_word_embeddings=False,
    )
    torch.manual_seed(recipe.seed)  # whatever transformers draws first is overwritten below
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    fill_weights(model, recipe.seed, recipe.init_range)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


# --- the record and the install ------------------------------------------------------------------------


def _plain_abs(path: str, what: str) -> Path:
    if not path.startswith("/") or os.path.normpath(path) != path or "//" in path:
        raise LabModelError(f"{what} {path!r} is not a normalised absolute path")
    return Path(path)


def read_record(record: Path) -> dict[str, Any] | None:
    """The record provisioning wrote, or None when there is none or it is not a JSON object."""
    try:
        doc = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def current(name: str, dest: Path, record: Path) -> dict[str, Any] | None:
    """The record when it names this model, builder and path and the files still match it."""
    rec = read_record(record)
    if rec is None or (rec.get("name"), rec.get("path"), rec.get("builder")) != (
        name,
        str(dest),
        BUILDER_VERSION,
    ):
        return None
    if dest.is_symlink() or not dest.is_dir():
        return None
    try:
        found, _ = tree_hash(dest)
    except (OSError, LabModelError):
        return None
    return rec if found == rec.get("sha256") else None


def _versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for dist in ("torch", "transformers", "tokenizers", "safetensors"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _chmod_tree(root: Path) -> None:
    """Folders 0755 and files 0644: the engine may run as another user than provisioning."""
    os.chmod(root, 0o755)  # noqa: S103 (a model, no secret: the engine's user reads it)
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            os.chmod(os.path.join(dirpath, d), 0o755)  # noqa: S103
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), 0o644)


def _write_record(record: Path, doc: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{record.name}.", suffix=".tmp", dir=record.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(doc, sort_keys=True) + "\n")
            fh.flush()
            os.fchmod(fh.fileno(), 0o644)
            os.fsync(fh.fileno())
        os.replace(tmp, record)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def ensure(name: str, dest_text: str, record_text: str, *, force: bool = False) -> dict[str, Any]:
    """Build `name` into dest unless the record says it is there already; returns the JSON line.

    Raises LabModelError on a refused argument, OSError when the files cannot be written.
    """
    recipe = RECIPES.get(name)
    if recipe is None:
        raise LabModelError(f"no lab model named {name!r} (known: {', '.join(sorted(RECIPES))})")
    dest = _plain_abs(dest_text, "--dest")
    record = _plain_abs(record_text, "--record")
    if record.is_symlink():
        raise LabModelError(f"{record} is a symbolic link")
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise LabModelError(f"{dest} is a symbolic link or not a folder")
    rec = None if force else current(name, dest, record)
    if rec is not None:
        return {**rec, "changed": False}
    t0 = time.monotonic()
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    old: Path | None = None
    try:
        build_into(recipe, tmp)
        sha, files = tree_hash(tmp)
        if dest.is_dir() and not force and _same(dest, sha):
            shutil.rmtree(tmp)
        else:
            _chmod_tree(tmp)
            if dest.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
                os.rename(dest, old / "model")
            os.rename(tmp, dest)
    except BaseException:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    doc = {
        "name": name,
        "path": str(dest),
        "sha256": sha,
        "files": files,
        "builder": BUILDER_VERSION,
        "versions": _versions(),
    }
    record.parent.mkdir(parents=True, exist_ok=True)
    _write_record(record, doc)
    return {**doc, "changed": True, "build_s": round(time.monotonic() - t0, 3)}


def _same(dest: Path, sha: str) -> bool:
    try:
        return tree_hash(dest)[0] == sha
    except (OSError, LabModelError):
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m orchestrator.workloads.labmodel", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--name", default="lab-tiny", help=f"one of {', '.join(sorted(RECIPES))}")
    ap.add_argument("--dest", help="the model's folder (absolute), e.g. /opt/orch/models/lab-tiny")
    ap.add_argument(
        "--record", help="the JSON record provisioning keeps, e.g. /opt/orch/venv/orch-model.json"
    )
    ap.add_argument("--force", action="store_true", help="build even when the record matches")
    ap.add_argument("--hash", metavar="DIR", help="only print the sha256 over DIR's files")
    a = ap.parse_args(argv)
    try:
        if a.hash:
            sha, files = tree_hash(_plain_abs(a.hash, "--hash"))
            print(json.dumps({"path": a.hash, "sha256": sha, "files": files}))
            return 0
        if not a.dest or not a.record:
            raise LabModelError("--dest and --record are required (or --hash DIR)")
        print(json.dumps(ensure(a.name, a.dest, a.record, force=a.force), sort_keys=True))
        return 0
    except LabModelError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        print(f"error: cannot build the lab model: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
