import unittest

import versions


class TestVersions(unittest.TestCase):
    def test_simple(self):
        self.assertEqual(versions.compare_versions("1.0", "2.0"), -1)


if __name__ == "__main__":
    unittest.main()
