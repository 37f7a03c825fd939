"""What tunes the Pulumi engine and SDK: the provider host's pool, the SDK's debug lines and its
wait for outputs (what each saves: docs/speed.md). Only the program and the provider plugin
import it."""
