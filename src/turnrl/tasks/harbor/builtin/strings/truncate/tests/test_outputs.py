"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import shorten


class TestOutputs(unittest.TestCase):
    def test_exact(self):
        self.assertEqual(shorten.truncate("hello", 5), "hello")

    def test_cut(self):
        self.assertEqual(shorten.truncate("abcdefghij", 6), "abc...")
        self.assertEqual(len(shorten.truncate("x" * 50, 10)), 10)

    def test_minimum(self):
        self.assertEqual(shorten.truncate("abcdef", 3), "...")
        with self.assertRaises(ValueError):
            shorten.truncate("abc", 2)


if __name__ == "__main__":
    unittest.main()
