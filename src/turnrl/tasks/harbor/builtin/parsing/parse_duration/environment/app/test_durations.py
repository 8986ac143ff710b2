import unittest

import durations


class TestDurations(unittest.TestCase):
    def test_hours_minutes(self):
        self.assertEqual(durations.parse_duration("1h30m"), 5400)


if __name__ == "__main__":
    unittest.main()
