import unittest

import rotation


class TestRotation(unittest.TestCase):
    def test_right(self):
        self.assertEqual(rotation.rotate([1, 2, 3, 4], 1), [4, 1, 2, 3])


if __name__ == "__main__":
    unittest.main()
