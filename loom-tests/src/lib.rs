//! Empty unless built with `--cfg fenceline_loom`: the models live in `tests/`.
