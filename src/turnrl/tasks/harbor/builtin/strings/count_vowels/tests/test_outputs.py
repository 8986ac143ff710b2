"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import vowels


class TestOutputs(unittest.TestCase):
    def test_mixed(self):
        self.assertEqual(vowels.count_vowels("Hello, World"), 3)

    def test_no_y(self):
        self.assertEqual(vowels.count_vowels("rhythm"), 0)

    def test_empty(self):
        self.assertEqual(vowels.count_vowels(""), 0)


if __name__ == "__main__":
    unittest.main()
