"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import textutils


class TestOutputs(unittest.TestCase):
    def test_runs_collapse(self):
        self.assertEqual(textutils.slugify("Hello,  World!"), "hello-world")

    def test_edges(self):
        self.assertEqual(textutils.slugify("  --Python 3.12--  "), "python-3-12")

    def test_plain(self):
        self.assertEqual(textutils.slugify("abc"), "abc")
        self.assertEqual(textutils.slugify("!!!"), "")


if __name__ == "__main__":
    unittest.main()
