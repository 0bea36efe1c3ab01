"""A time window of a MovieLens ``ratings.csv``, written as a release of its own.

Why: judging on data the project was not tuned on (issue 22) needs MovieLens-format data no one
developed on, and only ml-latest-small and ml-100k are at hand. A window whose ratings were
only ever FM training data in development (never a VM or test period) is such data: the
loaders read it like any release and the time split then evaluates on its own last period.

    python -m models.data.window ../shared/data/ml-latest-small ~/.cache/solaris/data/ml-early \\
        --before 2008-01-01

writes ``DEST/ratings.csv`` (same header and rows, in file order) and prints the row count.
"""

from __future__ import annotations

import argparse
import csv
from datetime import UTC, date, datetime
from pathlib import Path

from models.data.errors import DatasetNotFound, UnknownFormat

HEADER = ["userId", "movieId", "rating", "timestamp"]


def _epoch_s(day: date | None) -> float | None:
    return None if day is None else datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()


def write_window(
    src_dir: Path, dest_dir: Path, after: date | None = None, before: date | None = None
) -> int:
    """Copy the ratings with ``after <= time < before`` (UTC days); returns the rows written."""
    src = src_dir / "ratings.csv"
    if not src.is_file():
        raise DatasetNotFound(f"no ratings.csv in {src_dir}")
    lo, hi = _epoch_s(after), _epoch_s(before)
    dest_dir.mkdir(parents=True, exist_ok=True)
    written = 0
    with src.open(newline="") as fin, (dest_dir / "ratings.csv").open("w", newline="") as fout:
        reader, writer = csv.reader(fin), csv.writer(fout, lineterminator="\n")
        if next(reader, None) != HEADER:
            raise UnknownFormat(f"{src} does not start with the ml-latest header {HEADER}")
        writer.writerow(HEADER)
        for row in reader:
            t = float(row[3])
            if (lo is None or t >= lo) and (hi is None or t < hi):
                writer.writerow(row)
                written += 1
    return written


def main(argv: list[str] | None = None) -> None:
    """``python -m models.data.window SRC DEST [--after DAY] [--before DAY]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", type=Path, help="folder with an ml-latest ratings.csv")
    parser.add_argument("dest", type=Path, help="folder to write the window's ratings.csv to")
    parser.add_argument("--after", type=date.fromisoformat, help="first day kept (UTC)")
    parser.add_argument("--before", type=date.fromisoformat, help="first day dropped (UTC)")
    args = parser.parse_args(argv)
    n = write_window(args.src.expanduser(), args.dest.expanduser(), args.after, args.before)
    print(f"{n} ratings -> {args.dest / 'ratings.csv'}")


if __name__ == "__main__":
    main()
