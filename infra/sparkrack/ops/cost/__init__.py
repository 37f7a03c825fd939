"""`sparkrack cost`: running cost against API prices, from the stack, Prometheus or bench."""
