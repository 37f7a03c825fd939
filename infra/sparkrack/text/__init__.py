"""Pure text, so every room may import it: the grammars and spellings of what reaches a shell,
a path or a file, and the forms people read (byte units, tables)."""
