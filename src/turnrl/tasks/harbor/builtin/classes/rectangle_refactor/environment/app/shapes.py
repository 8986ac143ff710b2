class Rectangle:
    def __init__(self, width: float, height: float) -> None:
        self.width = width
        self.height = height

    def describe(self) -> str:
        return (
            f"{self.width}x{self.height} rectangle: area {self.width * self.height}, "
            f"perimeter {2 * (self.width + self.height)}"
        )
