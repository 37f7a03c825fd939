"""Configuration read in one place: the stack file or the program's config into a validated
`ClusterSpec` (`load`), its secrets, the YAML reader, the decode model's files, the cache."""
