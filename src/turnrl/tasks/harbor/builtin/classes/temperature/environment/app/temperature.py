class Temperature:
    """A temperature, stored in degrees Celsius."""
