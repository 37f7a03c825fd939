"""`sparkrack doctor`: what a rack's nodes and cables read, judged for a person."""
