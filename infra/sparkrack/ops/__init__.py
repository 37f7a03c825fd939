"""Operating a deployed rack: `sparkrack bench`, `cost`, `doctor` and `monitoring lint` (every
dashboard query against the live Prometheus)."""
