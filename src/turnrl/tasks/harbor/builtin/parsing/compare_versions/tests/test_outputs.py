"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import versions


class TestOutputs(unittest.TestCase):
    def test_numeric(self):
        self.assertEqual(versions.compare_versions("1.10", "1.9"), 1)
        self.assertEqual(versions.compare_versions("1.2.9", "1.2.10"), -1)

    def test_padding(self):
        self.assertEqual(versions.compare_versions("1.2", "1.2.0"), 0)
        self.assertEqual(versions.compare_versions("1.2.0.1", "1.2"), 1)

    def test_equal(self):
        self.assertEqual(versions.compare_versions("3", "3"), 0)


if __name__ == "__main__":
    unittest.main()
