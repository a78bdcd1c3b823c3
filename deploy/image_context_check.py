#!/usr/bin/env python3
"""Checks, without Docker, that the image's build can see every crate it builds.

    deploy/image_context_check.py [ROOT]

The image build (deploy/Dockerfile) copies directories of the repository into
its build stage, and .dockerignore decides which of them the build context
holds at all. A crate, a patched dependency or a workspace member that one of
the two leaves out breaks `docker build` with a missing path, which no other
test runs into. This check lays out what the build stage would hold: the
files .dockerignore lets into the context, copied by the Dockerfile's COPY
lines of the build stage. It then asks cargo to resolve the workspace there
(`cargo metadata --locked --offline --filter-platform HOST`), which fails on
any missing member, path dependency or `[patch]` path. The registry's crates
for this platform must already be downloaded (the suite builds the workspace
first); other platforms' crates are not needed.

Only the .dockerignore patterns this repository uses are understood: `*`,
`!NAME/` or `!NAME` (a top-level entry let back in), `**/NAME/` and
`**/*.EXT` (excluded at any depth); anything else is an error, so that a new
kind of pattern is taught here rather than silently misread.
"""
from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def context_rules(dockerignore: Path) -> list[tuple[str, bool]]:
    """(pattern, excluded) pairs in file order; the last match decides."""
    rules = []
    for line_no, raw in enumerate(dockerignore.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        include = line.startswith("!")
        pattern = line[1:] if include else line
        understood = (
            pattern == "*"
            or re.fullmatch(r"[A-Za-z0-9_.-]+/?", pattern)
            or re.fullmatch(r"\*\*/[^/*]+/|\*\*/\*\.[A-Za-z0-9]+", pattern)
        )
        if understood:
            rules.append((pattern, not include))
        else:
            sys.exit(f"{dockerignore}:{line_no}: pattern {line!r} is not one this check understands")
    return rules


def in_context(relative: Path, rules: list[tuple[str, bool]]) -> bool:
    excluded = False
    parts = relative.parts
    for pattern, excludes in rules:
        if pattern == "*":
            hit = True
        elif pattern.startswith("**/") and pattern.endswith("/"):
            hit = pattern[3:-1] in parts[:-1] or pattern[3:-1] == parts[-1]
        elif pattern.startswith("**/"):
            hit = fnmatch.fnmatch(parts[-1], pattern[3:])
        else:
            hit = parts[0] == pattern.rstrip("/")
        if hit:
            excluded = excludes
    return not excluded


def build_stage_copies(dockerfile: Path) -> list[tuple[list[str], str]]:
    """The first stage's COPY lines (sources, destination); later stages copy from it."""
    copies = []
    stage = 0
    for line in dockerfile.read_text().splitlines():
        words = line.split()
        if not words:
            continue
        if words[0].upper() == "FROM":
            stage += 1
        elif words[0].upper() == "COPY" and stage == 1 and not any(w.startswith("--from") for w in words):
            args = [w for w in words[1:] if not w.startswith("--")]
            copies.append((args[:-1], args[-1]))
    return copies


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
    rules = context_rules(root / ".dockerignore")
    copies = build_stage_copies(root / "deploy" / "Dockerfile")
    if not copies:
        sys.exit("deploy/Dockerfile: no COPY in its build stage")
    with tempfile.TemporaryDirectory(prefix="cronshard-image-context.") as tmp:
        stage = Path(tmp)
        for sources, destination in copies:
            for source in sources:
                src = root / source
                if not src.exists():
                    sys.exit(f"deploy/Dockerfile copies {source}, which the repository does not have")
                files = [src] if src.is_file() else [p for p in src.rglob("*") if p.is_file()]
                kept = [f for f in files if in_context(f.relative_to(root), rules)]
                if not kept:
                    sys.exit(f"deploy/Dockerfile copies {source}, but .dockerignore keeps it out of the build context")
                into = stage / destination.removeprefix("./")
                for f in kept:
                    if src.is_dir():
                        target = into / f.relative_to(src)
                    elif destination.endswith("/") or len(sources) > 1:
                        target = into / f.name
                    else:
                        target = into
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(f, target)
        # A full resolve: `--no-deps` would skip the `[patch]` paths. For
        # this machine's platform only: an unfiltered resolve reads every
        # platform's crates (Android's, Windows'), which a build here never
        # downloads, so it failed offline on a fresh machine.
        result = subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--locked", "--offline",
             "--filter-platform", host_platform()],
            cwd=stage, capture_output=True, text=True,
        )
        if result.returncode != 0:
            sys.exit("the image's build stage cannot resolve the workspace:\n" + result.stderr.strip())
    print(f"the image's build stage holds every crate it builds ({len(copies)} COPY lines)")


def host_platform() -> str:
    """The target triple rustc builds for here (the image's build stage is
    Linux as well)."""
    out = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
    return next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("host: "))


if __name__ == "__main__":
    main()
