"""The quick run's rule (tests/conftest.py): a test that starts a process must be marked slow."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
TESTS = Path(__file__).resolve().parent


@pytest.mark.slow
def test_an_unmarked_test_that_starts_a_process_fails_and_a_marked_one_runs(pytester):
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    pytester.makepyfile(tinymodel=(TESTS / "tinymodel.py").read_text(), alone=(TESTS / "alone.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    slow: starts a process\n")
    pytester.makepyfile(test_some="""
        import ctypes.util, multiprocessing, subprocess, sys
        import pytest

        def test_unmarked_subprocess():
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        def test_unmarked_multiprocessing():
            p = multiprocessing.get_context("spawn").Process(target=print)
            p.start()
            p.join()

        @pytest.mark.slow
        def test_marked():
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        def test_a_library_lookup_is_no_process_of_the_test():
            ctypes.util.find_library("c")
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines([
        "*test_unmarked_subprocess starts a process (subprocess.Popen) but is not marked slow*",
        "*test_unmarked_multiprocessing starts a process (multiprocessing) but is not marked slow*",
    ])
