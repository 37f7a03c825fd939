"""What tunes the Pulumi engine and SDK, each change measured: the provider host's pool, the
SDK's debug lines and its wait for outputs. Only the program and the provider plugin import it."""
