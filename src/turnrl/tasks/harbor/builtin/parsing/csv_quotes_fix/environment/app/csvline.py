def split_csv_line(line: str) -> list[str]:
    """The fields of one CSV line (double quotes protect commas)."""
    fields, current, quoted, i = [], "", False, 0
    while i < len(line):
        ch = line[i]
        if ch == '"':
            quoted = not quoted
        elif ch == "," and not quoted:
            fields.append(current)
            current = ""
        else:
            current += ch
        i += 1
    fields.append(current)
    return fields
