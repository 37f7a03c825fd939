"""Operating a deployed rack: `sparkrack bench`, `sparkrack cost`, `sparkrack doctor`."""
