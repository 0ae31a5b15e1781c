"""`python -m bench [NAME ...]`: run every bench/*.py module's main() (or only those named)."""

import importlib
import pkgutil
import sys
import time
from pathlib import Path


def modules(names: list[str]) -> list[str]:
    found = sorted(
        m.name
        for m in pkgutil.iter_modules([str(Path(__file__).parent)])
        if not m.name.startswith("_")
    )
    unknown = sorted(set(names) - set(found))
    if unknown:
        sys.exit(f"unknown benchmark(s): {', '.join(unknown)} (known: {', '.join(found)})")
    return [n for n in found if not names or n in names]


def main(argv: list[str]) -> int:
    failed = []
    for name in modules(argv):
        print(f"== bench.{name}", flush=True)
        started = time.monotonic()
        try:
            importlib.import_module(f"bench.{name}").main()
        except SystemExit as exc:
            if exc.code not in (0, None):
                failed.append(name)
                print(f"bench.{name} stopped: {exc.code}", flush=True)
        except Exception as exc:  # one benchmark failing does not hide the others' figures
            failed.append(name)
            print(f"bench.{name} failed: {exc!r}", flush=True)
        print(f"== bench.{name} took {time.monotonic() - started:.1f}s\n", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
