"""``solaris models check PATH``: does an ONNX file meet the FM contract (``models.fm_contract``)?
``solaris models pack`` / ``fetch``: a bundle as one archive, delivered by URL and sha256.

For a team bringing its own foundation model: run it before putting the file in a bundle as
``fm.onnx``. Exit 0 = it meets the contract; 1 = each problem printed on its own line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from streams.logs import announce, fail

console = Console()
app = typer.Typer(
    help="Check models against SOLARIS's contracts; pack and fetch bundles.", no_args_is_help=True
)


@app.command("check")
def check(
    path: Annotated[Path, typer.Argument(help="The ONNX file of a foundation model.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON.")] = False,
) -> None:
    """Validate an FM graph: input/output names, dtypes and ranks, metadata, one dummy batch."""
    from models.fm_contract import check_fm

    report = check_fm(path)
    if as_json:
        verdict = {
            "path": str(report.path),
            "ok": report.ok,
            "problems": report.problems,
            "model_version": report.model_version,
            "dim": report.dim,
            "history_len": report.history_len,
        }
        console.print_json(json.dumps(verdict))
    elif report.ok:
        console.print(
            f"ok: {path} meets the FM contract (model_version={report.model_version}, "
            f"dim={report.dim}, history_len={report.history_len})",
            markup=False,
            soft_wrap=True,
        )
    else:
        console.print(f"{path} does not meet the FM contract:", markup=False, soft_wrap=True)
        for problem in report.problems:
            console.print(f"- {problem}", markup=False, highlight=False, soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)


@app.command("pack")
def pack(
    bundle_dir: Annotated[Path, typer.Argument(help="A trained bundle directory (bundle-<key>).")],
    out: Annotated[Path, typer.Argument(help="The archive to write (.tar.gz).")],
) -> None:
    """Write a bundle as one reproducible .tar.gz and print its sha256 (as `sha256sum` does):
    publish the file, then set SOLARIS_BUNDLE_URL and SOLARIS_BUNDLE_SHA256 for `models fetch`."""
    from streams.bundle_fetch import BundleFetchError
    from streams.bundle_fetch import pack as pack_bundle

    try:
        digest = pack_bundle(bundle_dir, out)
    except BundleFetchError as exc:
        fail(str(exc), console=console)
        raise typer.Exit(1) from exc
    typer.echo(f"{digest}  {out}")


@app.command("fetch")
def fetch(
    url: Annotated[
        str | None, typer.Option("--url", help="Archive URL (default: SOLARIS_BUNDLE_URL).")
    ] = None,
    sha256: Annotated[
        str | None,
        typer.Option("--sha256", help="Its expected sha256 (default: SOLARIS_BUNDLE_SHA256)."),
    ] = None,
    dest: Annotated[
        Path | None, typer.Option("--dest", help="Where to unpack (default: SOLARIS_MODEL_DIR).")
    ] = None,
    attempts: Annotated[
        int, typer.Option("--attempts", min=1, help="Download attempts (network/5xx errors).")
    ] = 5,
) -> None:
    """Download a bundle archive (`models pack`), refuse it unless its sha256 matches, unpack
    it into DEST (the init container of a Kubernetes pod). A failure leaves DEST as it was."""
    from streams.bundle_fetch import BundleFetchError
    from streams.bundle_fetch import fetch as fetch_bundle
    from streams.settings import Settings

    settings = Settings()
    url = url or settings.bundle_url
    sha256 = sha256 or settings.bundle_sha256
    target = dest or settings.model_dir
    if not url or not sha256:
        missing = [
            n for n, v in (("SOLARIS_BUNDLE_URL", url), ("SOLARIS_BUNDLE_SHA256", sha256)) if not v
        ]
        fail(
            f"{' and '.join(missing)} not set (or pass --url/--sha256): `solaris models "
            "pack` writes the archive and prints its sha256",
            console=console,
            missing=missing,
        )
        raise typer.Exit(2)
    try:
        got = fetch_bundle(url, sha256, target, attempts=attempts)
    except BundleFetchError as exc:
        fail(str(exc), console=console)
        raise typer.Exit(1) from exc
    announce(
        f"fetched {got.bundle} ({got.size} bytes, sha256 {got.sha256})",
        console=console,
        bundle=str(got.bundle),
        size=got.size,
        sha256=got.sha256,
    )
