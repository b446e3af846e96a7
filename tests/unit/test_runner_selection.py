"""harness.runner.selection: targets, -k/-i/-x, and --shuffle keeping each class together."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import textwrap
import unittest
import uuid
from pathlib import Path

from harness.errors import UsageError
from harness.runner.selection import (check_includes, collect, discover, id_matches, load_target, module_matches,
                                      module_of, select, shuffle)
from tests.unit._fakes import make_tests

SUITE = make_tests({
    "proj.test_pipeline": {"TestPipeline": ["test_parity", "test_speed"]},
    "proj.test_fsdp_a": {"TestA": ["test_parity", "test_one"], "TestB": ["test_two"]},
    "proj.test_fsdp_b": {"TestC": ["test_three"]},
})


def ids(tests) -> list[str]:
    return [t.id() for t in tests]


class TestSelect(unittest.TestCase):
    def test_k_is_a_substring_or_a_shell_pattern(self):
        self.assertTrue(id_matches("proj.test_a.TestA.test_parity", "parity"))
        self.assertTrue(id_matches("proj.test_a.TestA.test_parity", "*TestA.test_*ty"))
        self.assertFalse(id_matches("proj.test_a.TestA.test_parity", "TestB"))
        self.assertEqual(ids(select(SUITE, patterns=["parity"])),
                         ["proj.test_pipeline.TestPipeline.test_parity", "proj.test_fsdp_a.TestA.test_parity"])

    def test_k_repeated_lets_through_any(self):
        self.assertEqual(len(select(SUITE, patterns=["test_speed", "test_three"])), 2)

    def test_include_by_name_last_part_path_or_pattern(self):
        for spec in ("proj.test_pipeline", "test_pipeline", "proj/test_pipeline.py", "test_pipe*"):
            self.assertEqual({module_of(t) for t in select(SUITE, include=[spec])}, {"proj.test_pipeline"}, spec)
        self.assertTrue(module_matches("proj.test_pipeline", "proj"))  # a package names its modules
        self.assertFalse(module_matches("proj.test_pipeline", "test_pipe"))  # not a prefix of the last part

    def test_exclude_wins_over_include(self):
        chosen = select(SUITE, include=["test_fsdp*"], exclude=["test_fsdp_b"])
        self.assertEqual({module_of(t) for t in chosen}, {"proj.test_fsdp_a"})

    def test_order_is_kept(self):
        self.assertEqual(ids(select(SUITE, patterns=["test_"])), ids(SUITE))

    def test_an_include_that_matches_nothing_names_the_modules(self):
        check_includes(SUITE, ["test_fsdp_a"])
        with self.assertRaises(UsageError) as cm:
            check_includes(SUITE, ["test_nosuch"])
        self.assertIn("-i test_nosuch", str(cm.exception))
        self.assertIn("proj.test_fsdp_b", str(cm.exception))


class TestShuffle(unittest.TestCase):
    def test_same_tests_and_the_seed_reproduces_the_order(self):
        first = shuffle(SUITE, 7)
        self.assertEqual(sorted(ids(first)), sorted(ids(SUITE)))
        self.assertEqual(ids(first), ids(shuffle(SUITE, 7)))
        self.assertTrue(any(ids(shuffle(SUITE, seed)) != ids(SUITE) for seed in range(10)))

    def test_each_class_stays_together(self):
        for seed in range(20):
            classes = [t.id().rsplit(".", 1)[0] for t in shuffle(SUITE, seed)]
            runs = [c for i, c in enumerate(classes) if i == 0 or classes[i - 1] != c]
            self.assertEqual(len(runs), len(set(runs)), f"seed {seed}: a class's tests were split apart")


class TestTargets(unittest.TestCase):
    """Targets are real files in a temporary project; loading them imports plain unittest modules."""

    def setUp(self):
        self.dir = Path(tempfile.mkdtemp(prefix="distharness-unit-"))
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        saved = list(sys.path)
        self.addCleanup(setattr, sys, "path", saved)
        self.name = f"test_u{uuid.uuid4().hex[:8]}"  # a fresh module name: nothing cached in sys.modules
        body = textwrap.dedent("""
            import unittest
            class TestOne(unittest.TestCase):
                def test_a(self): pass
                def test_b(self): pass
        """)
        (self.dir / f"{self.name}.py").write_text(body)
        pkg = self.dir / f"pkg_{self.name}"
        (pkg / "sub").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "sub" / "__init__.py").write_text("")
        (pkg / "sub" / "test_inner.py").write_text(body)
        self.pkg = pkg

    def test_a_file_outside_the_root_is_imported_by_its_stem(self):
        tests = load_target(str(self.dir / f"{self.name}.py"), root=Path(os.getcwd()))
        self.assertEqual(ids(tests), [f"{self.name}.TestOne.test_a", f"{self.name}.TestOne.test_b"])

    def test_a_folder_that_is_a_package_imports_from_above_its_top_package(self):
        tests = discover(self.pkg / "sub", root=self.dir)
        self.assertEqual({module_of(t) for t in tests}, {f"pkg_{self.name}.sub.test_inner"})

    def test_a_dotted_target_and_a_file_under_the_root(self):
        sys.path.insert(0, str(self.dir))
        self.assertEqual(len(collect([f"{self.name}.TestOne.test_b"], [], self.dir)), 1)
        here = os.getcwd()
        os.chdir(self.dir)
        self.addCleanup(os.chdir, here)
        self.assertEqual(ids(load_target(f"pkg_{self.name}/sub/test_inner.py", self.dir))[0],
                         f"pkg_{self.name}.sub.test_inner.TestOne.test_a")

    def test_no_target_discovers_the_default_folders(self):
        self.assertEqual(len(collect([], [".", "missing"], self.dir)), 2 + 2)  # a missing folder has none

    def test_a_module_or_name_that_fails_to_import_is_a_test_that_errors(self):
        # as unittest's loader: the import's own traceback is reported when the run gets there
        (failed,) = collect(["no_such_module_xyz"], [], self.dir)
        self.assertEqual(module_of(failed), "no_such_module_xyz")
        sys.path.insert(0, str(self.dir))
        (failed,) = collect([f"{self.name}.TestNoSuchClass"], [], self.dir)
        self.assertEqual(type(failed).__name__, "_FailedTest")

    def test_a_file_that_raises_at_import_is_a_test_that_errors_and_the_others_are_collected(self):
        boom = self.dir / f"test_boom_{self.name}.py"
        boom.write_text("raise RuntimeError('RAISED-AT-IMPORT')\n")
        failed, *rest = collect([str(boom), str(self.dir / f"{self.name}.py")], [], self.dir)
        self.assertEqual(type(failed).__name__, "_FailedTest")
        with self.assertRaises(ImportError) as cm:  # unittest's own failed-import test: its traceback when it runs
            getattr(failed, failed._testMethodName)()
        self.assertIn("RAISED-AT-IMPORT", str(cm.exception))
        self.assertEqual(ids(rest), [f"{self.name}.TestOne.test_a", f"{self.name}.TestOne.test_b"])

    def test_a_missing_file_is_a_usage_error_naming_it(self):
        target = str(self.dir / "test_missing.py")
        with self.assertRaises(UsageError) as cm:
            collect([target], [], self.dir)
        self.assertIn(target, str(cm.exception))


class TestIsClassError(unittest.TestCase):
    """is_class_error: unittest's stand-in for a class's or module's set-up or tear-down that raised, which has no
    stopTest of its own (under torchrun it is posted for the other launched processes)."""

    def test_the_stand_ins(self):
        from harness.runner.results import is_class_error

        for kind in ("setUpClass", "tearDownClass", "setUpModule", "tearDownModule"):
            self.assertTrue(is_class_error(unittest.suite._ErrorHolder(f"{kind} (tests.fixtures.T)")), kind)

    def test_not_a_test_nor_another_holder(self):
        from harness.runner.results import is_class_error

        self.assertFalse(is_class_error(self))
        self.assertFalse(is_class_error(unittest.suite._ErrorHolder("something (else)")))


if __name__ == "__main__":
    unittest.main()
