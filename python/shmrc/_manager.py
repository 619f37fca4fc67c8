"""The user's manager, run from this package: ``python -m shmrc._manager manager``
starts one detached (if none runs), prints its pid and exits; ``manager --foreground``
serves it in this process until its grace period passes with no client. This is the
command the package gives the library at import (``shmrc.manager`` in the Rust
library runs it when a file_system buffer is first used), so the manager needs
nothing installed beyond this package. The serving is the library's own
(``shmrc::manager::serve``), as in ``shmrc manager [--foreground]``."""

import sys

from . import _shmrc


USAGE = "usage: python -m shmrc._manager manager [--foreground] [--grace-ms MS]"


def main(argv):
    if not argv or argv[0] != "manager":
        print(USAGE, file=sys.stderr)
        return 2
    foreground = False
    grace_ms = None
    rest = list(argv[1:])
    while rest:
        arg = rest.pop(0)
        if arg == "--foreground":
            foreground = True
        elif arg == "--grace-ms" and rest:
            grace_ms = int(rest.pop(0))
        else:
            print(USAGE, file=sys.stderr)
            return 2
    try:
        pid = _shmrc.run_manager(foreground, grace_ms)
    except _shmrc.ShmrcError as e:
        print("shmrc manager: %s" % e, file=sys.stderr)
        return 1
    if pid is not None:
        print(pid)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
