import unittest

import csvline


class TestCsvline(unittest.TestCase):
    def test_plain(self):
        self.assertEqual(csvline.split_csv_line("a,b,c"), ["a", "b", "c"])

    def test_quoted_comma(self):
        self.assertEqual(csvline.split_csv_line('x,"1,2",y'), ["x", "1,2", "y"])


if __name__ == "__main__":
    unittest.main()
