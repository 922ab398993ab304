"""Coordination state in Redis: the connection and its one error translator, the lane, views, leases,
events; the embedded server and its process plumbing. Safe to lose: the disk decides every write."""
