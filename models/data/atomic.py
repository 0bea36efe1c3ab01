"""RecBole atomic interaction files (``<name>.inter``), and MovieLens 100K as a PyPI package ships it.

Our machines reach package registries only, not grouplens.org. The ``recbole`` wheel on PyPI
(RecBole, MIT licence; MovieLens itself is GroupLens's, free for research use, not to be
redistributed: the extracted file lives in the user's cache and is never committed) bundles
MovieLens 100K as ``recbole/dataset_example/ml-100k/ml-100k.inter``. An atomic file is
tab-separated with a typed header naming each column
(``user_id:token  item_id:token  rating:float  timestamp:float``); columns may come in any
order, so the loader finds them by name (:func:`rating_columns`).

Fetch once (needs ``pip`` and PyPI; writes ``DEST/ml-100k/ml-100k.inter``)::

    python -m models.data.atomic ~/.cache/solaris/data
    solaris evaluate --dataset movielens --data-dir ~/.cache/solaris/data/ml-100k
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from models.data.errors import DatasetNotFound, UnknownFormat

ATOMIC_SUFFIX = ".inter"
RECBOLE_REQUIREMENT = "recbole==1.2.1"
"""The wheel fetched for its bundled data (pinned: the file's bytes must not drift)."""
ML100K_MEMBER = "recbole/dataset_example/ml-100k/ml-100k.inter"
ML100K_ROWS = 100_000
_FIELDS = {"user": "user_id", "item": "item_id", "rating": "rating", "timestamp": "timestamp"}


@dataclass(frozen=True, slots=True)
class RatingColumns:
    """Positions of the four rating fields in a row of ``n_fields`` separated values."""

    user: int
    item: int
    rating: int
    timestamp: int
    n_fields: int


MOVIELENS_COLUMNS = RatingColumns(0, 1, 2, 3, 4)
"""The fixed order of every GroupLens MovieLens ratings file."""


def rating_columns(header: str) -> RatingColumns:
    """Column positions from an atomic header line; ``UnknownFormat`` if a field is absent."""
    names = [part.split(":", 1)[0].strip() for part in header.rstrip("\r\n").split("\t")]
    missing = [name for name in _FIELDS.values() if name not in names]
    if missing:
        raise UnknownFormat(f"atomic header {header.strip()!r} lacks {', '.join(missing)}")
    pos = {key: names.index(name) for key, name in _FIELDS.items()}
    return RatingColumns(pos["user"], pos["item"], pos["rating"], pos["timestamp"], len(names))


def read_header(path: Path) -> RatingColumns:
    """The rating columns of the atomic file at ``path`` (reads its first line only)."""
    with path.open(encoding="utf-8", errors="replace") as fh:
        return rating_columns(fh.readline())


def extract_ml100k(wheel: Path, dest: Path) -> Path:
    """Copy MovieLens 100K out of a RecBole wheel into ``dest/ml-100k/``; returns the file."""
    target = dest / "ml-100k" / "ml-100k.inter"
    try:
        with zipfile.ZipFile(wheel) as zf:
            data = zf.read(ML100K_MEMBER)
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise DatasetNotFound(f"{wheel}: no {ML100K_MEMBER} ({exc})") from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".part")
    tmp.write_bytes(data)
    tmp.replace(target)  # atomic: a reader never sees half a file
    return target


def fetch_ml100k(dest: Path) -> Path:
    """``dest/ml-100k/ml-100k.inter``, downloading the pinned RecBole wheel (no deps) if absent.

    Blocking (one ~2 MB download); idempotent. Raises ``DatasetNotFound`` when pip fails.
    """
    target = dest / "ml-100k" / "ml-100k.inter"
    if target.is_file():
        return target
    with tempfile.TemporaryDirectory(prefix="solaris-recbole-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        done = subprocess.run(
            [*cmd, "-d", tmp, RECBOLE_REQUIREMENT], capture_output=True, text=True, check=False
        )
        wheels = sorted(Path(tmp).glob("recbole-*.whl"))
        if done.returncode != 0 or not wheels:
            raise DatasetNotFound(
                f"pip download {RECBOLE_REQUIREMENT} failed: {done.stderr.strip()[-400:]}"
            )
        return extract_ml100k(wheels[0], dest)


def main(argv: list[str] | None = None) -> int:
    """``python -m models.data.atomic DEST``: fetch MovieLens 100K into ``DEST/ml-100k``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("dest", type=Path, help="data folder, e.g. ~/.cache/solaris/data")
    args = parser.parse_args(argv)
    print(fetch_ml100k(args.dest.expanduser()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
