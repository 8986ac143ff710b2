"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import roman


class TestOutputs(unittest.TestCase):
    def test_year(self):
        self.assertEqual(roman.from_roman("MCMXCIV"), 1994)
        self.assertEqual(roman.from_roman("MMXXV"), 2025)

    def test_lower(self):
        self.assertEqual(roman.from_roman("xlii"), 42)

    def test_single(self):
        self.assertEqual(roman.from_roman("I"), 1)
        self.assertEqual(roman.from_roman("IV"), 4)

    def test_bad(self):
        for text in ("", "ABC", "X I"):
            with self.assertRaises(ValueError):
                roman.from_roman(text)


if __name__ == "__main__":
    unittest.main()
