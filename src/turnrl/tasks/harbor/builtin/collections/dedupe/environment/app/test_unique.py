import unittest

import unique


class TestUnique(unittest.TestCase):
    def test_order(self):
        self.assertEqual(unique.dedupe([3, 1, 3, 2, 1]), [3, 1, 2])


if __name__ == "__main__":
    unittest.main()
