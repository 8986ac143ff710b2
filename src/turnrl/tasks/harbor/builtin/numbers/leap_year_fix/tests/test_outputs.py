"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import calendar_utils


class TestOutputs(unittest.TestCase):
    def test_centuries(self):
        self.assertFalse(calendar_utils.is_leap(1900))
        self.assertFalse(calendar_utils.is_leap(2100))
        self.assertTrue(calendar_utils.is_leap(2000))

    def test_days(self):
        self.assertEqual(calendar_utils.days_in_year(1900), 365)
        self.assertEqual(calendar_utils.days_in_year(2000), 366)


if __name__ == "__main__":
    unittest.main()
