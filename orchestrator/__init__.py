"""orch: GPU lab acceptance and nightly collective-communication testing."""

__version__ = "0.1.0"
