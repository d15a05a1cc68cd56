"""Passive health: one sample of each node's kernel log, sysfs counters and GPU/RDMA tools
(docs/health.md)."""
