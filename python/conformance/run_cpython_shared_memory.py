"""Runs CPython's own tests of ``multiprocessing.shared_memory`` against
``shmrc.shared_memory``, by substitution.

The tests are the interpreter's: class ``_TestSharedMemory`` of
``test/_test_multiprocessing.py`` (the ``test`` package CPython ships; nothing is
copied here). Before they run, ``multiprocessing.shared_memory`` (the module
attribute, ``sys.modules`` entry and the test module's global) is
``shmrc.shared_memory``, and ``multiprocessing.managers.SharedMemoryManager`` is
``shmrc.managers.SharedMemoryManager``; the tests run as CPython's
``test_multiprocessing_fork`` runs them ("processes" type, fork start method).

Every test runs except those in ``EXCLUDED`` (each with its reason, as PYTHON.md
lists them). The run uses a namespace of its own and fails if it leaves any segment
of it in ``/dev/shm``. Exit status 0 only if every test ran and passed.

    python run_cpython_shared_memory.py [-v]
"""

import os
import sys
import time
import unittest

#: Tests not run, with why (docs/PYTHON.md repeats them).
EXCLUDED = {
    "test_shared_memory_cleaned_after_process_termination": (
        "it starts a fresh interpreter (`python -E -c ...`) that imports the "
        "stdlib's multiprocessing.shared_memory, which no substitution reaches, and "
        "asserts the stdlib's resource-tracker warning 'There appear to be 1 leaked "
        "shared_memory objects'; shmrc's own crash tests (test_shared_memory.py) "
        "check what it is about with shmrc in the killed process"
    ),
    "test_shared_memory_SharedMemoryManager_reuses_resource_tracker": (
        "it runs the stdlib's SharedMemoryManager in a fresh interpreter (`python "
        "-c`), which no substitution reaches, and is about the stdlib's resource "
        "tracker, which shmrc does not use; test_shared_memory.py runs the same "
        "script with shmrc.managers and checks that it prints nothing"
    ),
}


def shm_left(prefix):
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix + "."))


def main(argv):
    verbosity = 2 if "-v" in argv else 1
    namespace = "shmrc-cpython-%d" % os.getpid()
    os.environ["SHMRC_SHARED_MEMORY_NAMESPACE"] = namespace

    try:
        import test._test_multiprocessing as cpython
    except ImportError as e:
        print(
            "CPython's test package is missing (%s): install it (e.g. Debian's "
            "libpython3.X-testsuite) or use a python.org / pyenv build" % e,
            file=sys.stderr,
        )
        return 2

    import multiprocessing
    import multiprocessing.managers

    import shmrc.managers
    import shmrc.shared_memory

    multiprocessing.shared_memory = shmrc.shared_memory
    sys.modules["multiprocessing.shared_memory"] = shmrc.shared_memory
    cpython.shared_memory = shmrc.shared_memory
    multiprocessing.managers.SharedMemoryManager = shmrc.managers.SharedMemoryManager

    module = {"__name__": "cpython_shared_memory"}
    cpython.install_tests_in_module_dict(module, "fork", only_type="processes")
    [cls] = [
        c
        for c in module.values()
        if isinstance(c, type) and issubclass(c, cpython._TestSharedMemory)
    ]
    names = unittest.TestLoader().getTestCaseNames(cls)
    unknown = set(EXCLUDED) - set(names)
    if unknown:
        print("excluded tests this CPython does not have: %s" % sorted(unknown), file=sys.stderr)
        return 2
    suite = unittest.TestSuite(cls(n) for n in names if n not in EXCLUDED)

    # Proof that the tests ran on shmrc: every block made in this process is counted
    # (the forked children's are not, and need not be).
    made = [0]
    publish = shmrc.shared_memory._publish

    def counted(*args):
        made[0] += 1
        return publish(*args)

    shmrc.shared_memory._publish = counted
    module["setUpModule"]()
    try:
        result = unittest.TextTestRunner(verbosity=verbosity).run(suite)
    finally:
        module["tearDownModule"]()

    deadline = time.monotonic() + 3
    while shm_left(namespace) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = shm_left(namespace)
    if left:
        shmrc.sweep(namespace)
    print(
        "CPython %s _TestSharedMemory against shmrc.shared_memory: %d run, %d failed, "
        "%d errors, %d skipped, %d excluded"
        % (
            sys.version.split()[0],
            result.testsRun,
            len(result.failures),
            len(result.errors),
            len(result.skipped),
            len(EXCLUDED),
        )
    )
    for name, why in sorted(EXCLUDED.items()):
        print("  excluded %s: %s" % (name, why))
    # The name index: stale entries (blocks closed without unlink) go; a live one
    # would be a leak.
    stale = shmrc.shared_memory.prune(namespace)
    index = shmrc.shared_memory._index_dir(namespace)
    live = [n for n in os.listdir(index) if n != ".lock"]
    if not live:
        if os.path.exists(os.path.join(index, ".lock")):
            os.unlink(os.path.join(index, ".lock"))
        os.rmdir(index)
    print("  shmrc blocks made by the tests: %d (stale names pruned: %d)" % (made[0], len(stale)))
    if live:
        print("live names left in the index: %s" % live, file=sys.stderr)
        return 1
    if left:
        print("left in /dev/shm: %s" % left, file=sys.stderr)
        return 1
    if made[0] == 0:
        print("no shmrc block was made: the substitution did not work", file=sys.stderr)
        return 1
    if result.testsRun == 0:
        return 1
    return 0 if result.wasSuccessful() and not result.skipped else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
