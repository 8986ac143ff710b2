import unittest

import temperature


class TestTemperature(unittest.TestCase):
    def test_boiling(self):
        self.assertEqual(temperature.Temperature(100).fahrenheit, 212)


if __name__ == "__main__":
    unittest.main()
