"""Finding the bad node or link: the search (pure logic); the Slurm run comes with orch isolate."""
