"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import caesar


class TestOutputs(unittest.TestCase):
    def test_wrap(self):
        self.assertEqual(caesar.shift("xyz", 3), "abc")
        self.assertEqual(caesar.shift("Zebra", 1), "Afcsb")

    def test_back_and_others(self):
        self.assertEqual(caesar.shift("a-b c!", -1), "z-a b!")
        self.assertEqual(caesar.shift("Hello", 52), "Hello")


if __name__ == "__main__":
    unittest.main()
