"""Task generation internals for step_07: localisation (`i18n`), template catalogue and constraint
checks (`catalog`), hidden user facts (`facts`), the seeded generator (`generator`) and the
simulated user (`user`). Import the public API from `cells.step_07_tasks`."""
