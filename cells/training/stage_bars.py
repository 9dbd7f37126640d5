"""Progress bars sized to one curriculum stage, in a notebook and in a terminal.

Every stage's trainer runs with `max_steps` = the whole curriculum (one cosine curve) and
`StageStopCallback` stops it at the stage boundary, often long before `max_steps`. HF's progress
callbacks assume a run goes from its start to `max_steps`:

- `NotebookProgressCallback` (what `Trainer` uses inside a Jupyter kernel) sizes its bar to
  `max_steps`, reports `global_step + 1` after each step but `global_step` at `on_train_end`.
  A stage that stops short of `max_steps` after exactly two steps (cpu-smoke: steps 2 of 6, and
  4 of 6 on resume) ends on the bar's first reported value while a remaining-time estimate is
  still set, so `update_bar` formats `1 / average_time_per_item` with None: `TypeError`, and the
  notebook's step 15 cell died. With other step counts the bar just stops part-way ("2/6").
- `ProgressCallback` (tqdm) also counts to `max_steps`, and on resume jumps by the whole
  restored `global_step` on its first update.

`use_stage_progress` swaps either for a bar over the stage's own window (e.g. "GRPO stage 2:
2/2"), started at `on_train_begin` (so it always has a start time) and reporting `global_step`
consistently; it finishes full whenever the stage reaches its boundary. Trainers without a
progress callback (`disable_tqdm=True`) are left alone.
"""

from __future__ import annotations

import sys
from typing import Any

from transformers.trainer_callback import ProgressCallback


class StageProgressCallback(ProgressCallback):
    """tqdm bar over one stage's steps: `start_step`..`end_step` of the curriculum."""

    def __init__(self, stage: int, start_step: int, end_step: int) -> None:
        super().__init__()
        self.stage, self.start_step, self.end_step = stage, start_step, end_step

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        from tqdm.auto import tqdm

        if state.is_world_process_zero:
            self.training_bar = tqdm(total=self.end_step - self.start_step, initial=state.global_step - self.start_step,
                                     desc=f"GRPO stage {self.stage}", dynamic_ncols=True)
        self.current_step = state.global_step  # the parent's on_step_end advances by the difference


def _notebook_callback(stage: int, start_step: int, end_step: int) -> Any:
    """A `NotebookProgressCallback` whose tracker spans the stage window (built lazily: needs IPython)."""
    from transformers.utils.notebook import NotebookProgressCallback, NotebookTrainingTracker

    class StageNotebookProgressCallback(NotebookProgressCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            super().on_train_begin(args, state, control, **kwargs)  # column names, loss table
            self.training_tracker = NotebookTrainingTracker(end_step - start_step, self.training_tracker.inner_table[0])
            self.training_tracker.prefix = f"GRPO stage {stage}"
            self._report(state)  # first update: starts the clock at train begin, not after a step

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._report(state, force=self._force_next_update)
            self._force_next_update = False

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._report(state, force=True)
            self.training_tracker = None

        def _report(self, state: Any, force: bool = False) -> None:
            self.training_tracker.update(state.global_step - start_step, force_update=force,
                                         comment=f"global step {state.global_step}/{state.max_steps}")

    return StageNotebookProgressCallback()


def use_stage_progress(trainer: Any, stage: int, start_step: int, end_step: int) -> None:
    """Replace `trainer`'s HF progress callback by one over the stage window (see module docstring)."""
    notebook = sys.modules.get("transformers.utils.notebook")  # imported by transformers only in a kernel
    for callback in list(trainer.callback_handler.callbacks):
        if notebook is not None and isinstance(callback, notebook.NotebookProgressCallback):
            replacement = _notebook_callback(stage, start_step, end_step)
        elif type(callback) is ProgressCallback:
            replacement = StageProgressCallback(stage, start_step, end_step)
        else:
            continue
        trainer.remove_callback(callback)
        trainer.add_callback(replacement)
