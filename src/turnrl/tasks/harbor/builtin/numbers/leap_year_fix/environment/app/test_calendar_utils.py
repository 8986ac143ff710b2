import unittest

import calendar_utils


class TestCalendarUtils(unittest.TestCase):
    def test_plain(self):
        self.assertTrue(calendar_utils.is_leap(2024))
        self.assertFalse(calendar_utils.is_leap(2023))


if __name__ == "__main__":
    unittest.main()
