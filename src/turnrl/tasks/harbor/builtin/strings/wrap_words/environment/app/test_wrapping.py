import unittest

import wrapping


class TestWrapping(unittest.TestCase):
    def test_two_lines(self):
        self.assertEqual(wrapping.wrap("the quick brown fox", 10), ["the quick", "brown fox"])


if __name__ == "__main__":
    unittest.main()
