"""sparkrack: declarative GB10 / GPU-server LLM inference clusters on Pulumi."""
