"""Drives a replica core with a real store: persist, then send, then advance."""
