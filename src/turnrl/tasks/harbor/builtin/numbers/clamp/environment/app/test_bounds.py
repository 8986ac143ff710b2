import unittest

import bounds


class TestBounds(unittest.TestCase):
    def test_inside(self):
        self.assertEqual(bounds.clamp(5, 0, 10), 5)


if __name__ == "__main__":
    unittest.main()
