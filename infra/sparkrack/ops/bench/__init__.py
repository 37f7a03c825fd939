"""`sparkrack bench`: the deployed endpoint measured, stored, compared, and kept as calibration."""
