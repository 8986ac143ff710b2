import unittest

import shapes


class TestShapes(unittest.TestCase):
    def test_describe(self):
        self.assertEqual(shapes.Rectangle(2, 3).describe(), "2x3 rectangle: area 6, perimeter 10")


if __name__ == "__main__":
    unittest.main()
