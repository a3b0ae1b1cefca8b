"""``python -m hatchway.docs [--check] [--root DIR]``: regenerate docs/ (or check it is current)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hatchway.docs.generate import stale_files, write_files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hatchway.docs",
        description="Regenerate docs/configuration.md, docs/errors.md and docs/schemas/*.json from the code.",
    )
    parser.add_argument("--check", action="store_true", help="only report stale files (exit 1 if any)")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository root (default: .)")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.root)
        for path in stale:
            print(f"stale: {path} (run `python -m hatchway.docs` and commit it)", file=sys.stderr)
        return 1 if stale else 0
    changed = write_files(args.root)
    print("\n".join(f"wrote {path}" for path in changed) or "docs/ is up to date")
    return 0


sys.exit(main())
