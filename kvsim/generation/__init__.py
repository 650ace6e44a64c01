"""Whole mlx-lm generations: will this model, at this context, fit?

One idea per module: ``config`` (where a ``config.json`` comes from), ``model`` (mlx-lm's model built
from it without evaluating weights, and the weight bytes), ``trace`` (what one forward step allocates,
recorded from the mlx-lm model itself), ``schedule`` (``generate_step``'s prefill chunks, cache clears
and decode), ``predict`` (the whole generation's peak), ``devices`` and ``verdict`` (does it fit, and
what makes it fit), ``measure`` (real generations with random weights, to calibrate and validate).
"""
