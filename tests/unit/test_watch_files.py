"""Which imported files ``--watch`` takes for the project's: not installed packages, wherever they are on the path."""
import importlib
import os
import sys
import tempfile
import unittest

from harness.runner import watch


class TestTheProjectsFiles(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        root = os.path.realpath(self.tmp.name)
        self.installed = os.path.join(root, "venv", "lib", "python3", "site-packages")
        self.project = os.path.join(root, "project")
        os.makedirs(os.path.join(self.installed, "wf_installed_pkg"))
        os.makedirs(self.project)
        with open(os.path.join(self.installed, "wf_installed_pkg", "__init__.py"), "w") as f:
            f.write("X = 1\n")
        with open(os.path.join(self.project, "wf_project_mod.py"), "w") as f:
            f.write("import wf_installed_pkg\n")
        # reached as a plain path entry (PYTHONPATH, a .pth file), not as a site folder of this interpreter
        sys.path[:0] = [self.installed, self.project]
        self.addCleanup(lambda: [sys.path.remove(p) for p in (self.installed, self.project)])
        self.addCleanup(lambda: [sys.modules.pop(m, None) for m in ("wf_installed_pkg", "wf_project_mod")])
        importlib.invalidate_caches()
        importlib.import_module("wf_project_mod")

    def test_a_site_packages_folder_on_the_path_is_installed_code(self):
        files = watch._module_files()
        self.assertEqual(files.get("wf_project_mod"), os.path.join(self.project, "wf_project_mod.py"))
        self.assertNotIn("wf_installed_pkg", files)

    def test_torch_is_never_the_projects(self):
        import torch  # noqa: F401 - installed, wherever this interpreter finds it

        self.assertFalse([n for n in watch._module_files() if n == "torch" or n.startswith("torch.")])


if __name__ == "__main__":
    unittest.main()
