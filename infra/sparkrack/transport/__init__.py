"""SSH to the nodes: who is reached (`target`), the pooled connection (`ssh`), host keys outside
a connection (`host_keys`) and the OpenSSH client config (`openssh`). Knows hosts, not Plans."""
