"""What happens to runs over time, outside one scale-test: the nightly job (Slurm cron) and the
cleanup of jobs that a dead run left behind. store/ keeps results only."""
