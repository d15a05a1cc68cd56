"""Per-node certificates: built from a finished run folder (build), sealed with a content hash
(digest), written into the run folder and found again (service). See docs/isolation.md."""
