"""The run readers behind `python -m cells results` (`results.py`: a finished run's tables and plots into
docs/results.md) and `python -m cells diagnose` (`diagnose.py`: replay where a run's models fail). They read what
every step wrote; the statistics and reports they call live in `cells/evaluation/`.
"""
