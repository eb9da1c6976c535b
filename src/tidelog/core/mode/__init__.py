"""The replication modes of a replica: what each decides (base.py: the `Mode` protocol),
quorum.py (a majority elects its leader) and isr.py (the controller's record names it)."""
