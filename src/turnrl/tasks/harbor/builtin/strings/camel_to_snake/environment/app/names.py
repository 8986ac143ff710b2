def camel_to_snake(name: str) -> str:
    """`name` in camelCase or PascalCase, in snake_case."""
    raise NotImplementedError
