import unittest

import roman


class TestRoman(unittest.TestCase):
    def test_small(self):
        self.assertEqual(roman.from_roman("XIV"), 14)


if __name__ == "__main__":
    unittest.main()
