"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import temperature


class TestOutputs(unittest.TestCase):
    def test_from_fahrenheit(self):
        self.assertAlmostEqual(temperature.Temperature.from_fahrenheit(32).celsius, 0)
        self.assertAlmostEqual(temperature.Temperature.from_fahrenheit(-40).celsius, -40)

    def test_read_only(self):
        t = temperature.Temperature(10)
        with self.assertRaises(AttributeError):
            t.fahrenheit = 3

    def test_absolute_zero(self):
        with self.assertRaises(ValueError):
            temperature.Temperature(-300)
        temperature.Temperature(-273.15)


if __name__ == "__main__":
    unittest.main()
