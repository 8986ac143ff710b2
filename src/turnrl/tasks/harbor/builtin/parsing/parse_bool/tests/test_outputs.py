"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import flags


class TestOutputs(unittest.TestCase):
    def test_case_and_space(self):
        self.assertTrue(flags.parse_bool("  TRUE "))
        self.assertFalse(flags.parse_bool("No"))

    def test_digits(self):
        self.assertTrue(flags.parse_bool("1"))
        self.assertFalse(flags.parse_bool("0"))

    def test_bad(self):
        for text in ("", "maybe", "2"):
            with self.assertRaises(ValueError):
                flags.parse_bool(text)


if __name__ == "__main__":
    unittest.main()
