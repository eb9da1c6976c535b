"""The replication modes of a replica, each the decisions of `Mode` (core/roles.py):
quorum.py (a majority elects its leader) and isr.py (the controller's record names it)."""
