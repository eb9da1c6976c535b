"""The asyncio broker: sockets, timers, request routing, and its configuration."""
