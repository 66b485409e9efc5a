"""``python -m hora``: what this installation of Hora is and can do.

    python -m hora --version         the version
    python -m hora --check-build     frameworks, transports, versions and GPU support (the report
                                     of ``horarun -cb``); also what ``python -m hora`` prints
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hora", description="What this installation of Hora is and can do.")
    parser.add_argument("--version", action="store_true", help="print Hora's version")
    parser.add_argument("-cb", "--check-build", action="store_true",
                        help="print the frameworks, transports, versions and GPU support found "
                        "(the default)")
    args = parser.parse_args(argv)
    from hora import _core
    from hora.runner import check_build

    if args.version:
        print(f"hora {_core.version}")
    if args.check_build or not args.version:
        sys.stdout.write(check_build.report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
